"""The simulated serving on the virtual clock: the engine loop, the hub that hands
each step's events to the streams, the connections between them and the clients
that read them."""
