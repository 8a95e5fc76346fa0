"""The runner's CPU kernels: C++ compiled for this machine on first use (`build`),
each beside the Python that calls it: decode attention over the paged cache, a
Llama layer's elementwise steps, and greedy picks."""
