"""The runner's CPU kernels: C++ compiled for this machine on first use (`build`),
each beside the Python that calls it: attention over the paged cache, storing K
and V in it, a Llama layer's elementwise steps, and greedy picks."""
