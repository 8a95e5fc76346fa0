"""Request traces: the native JSONL format, loaders for public traces, synthetic
generators and sample traces. One trace drives both the simulator and the live
load generator, and one summary (`summarize`) measures what either made of it.
See traces/README.md for the format and the command line."""
from pathlib import Path

from .synthetic.arrivals import arrival_times
from .synthetic.client_mix import ClientMix
from .errors import TraceError
from .synthetic.generate import generate
from .jsonl import read_trace, write_trace
from .synthetic.lengths import Fixed, LogNormal, Resampled, Uniform, parse_lengths
from .load import detect_format, load_trace
from .public.azure import load_azure
from .public.burstgpt import load_burstgpt
from .public.mooncake import load_mooncake
from .public.vidur import load_vidur
from .record import Client, LeaveHow, ReadMode, TraceRequest
from .shaping import shape
from .stats import TraceStats, format_stats, trace_stats
from .summary import Summary, format_summary, summarize

SAMPLES_DIR = Path(__file__).parent / "samples"
"""The sample traces shipped with the package (see samples/README.md)."""

__all__ = [
    "SAMPLES_DIR", "Client", "ClientMix", "Fixed", "LeaveHow", "LogNormal", "ReadMode",
    "Resampled", "Summary", "TraceError", "TraceRequest", "TraceStats", "Uniform", "arrival_times",
    "detect_format", "format_stats", "format_summary", "generate", "load_azure", "load_burstgpt",
    "load_mooncake", "load_trace", "load_vidur", "parse_lengths", "read_trace", "shape",
    "summarize", "trace_stats", "write_trace",
]
