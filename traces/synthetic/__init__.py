"""Synthetic traces: arrival processes, length distributions, client mixes, and
the generator that draws a trace from them."""
