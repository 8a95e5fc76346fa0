"""Studies: one question about streaming each (overlap, slow readers, disconnects,
backpressure, head-of-line blocking, a proxy in front), asked of the live server
and of the simulator with the same settings and workload, and answered as a table
beside a published reference figure."""
