"""`python -m analysis validate`: one calibration judged against a matrix of live
runs (settings by traces), each live cell run several times so that the
simulator's error is measured against live's median and beside live's own spread."""
