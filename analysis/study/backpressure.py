"""Backpressure: how many bytes a client that reads nothing absorbs (socket send
and receive buffers) before the server's writes block and events queue in the
server, by event size; with the OS's buffers and with a small client receive
buffer. The simulator's transport model assumes one capacity for every connection."""
from __future__ import annotations

from dataclasses import dataclass

from sim.wire import WIRE_FORMATS
from traces import Client, LeaveHow, ReadMode, TraceRequest

from .bench import Bench, Findings, Quantity
from .watch import StatsWatch

PROMPT_TOKENS = 16
UNPADDED = WIRE_FORMATS["twinstep"].token_bytes


@dataclass(frozen=True)
class BackpressureSize:
    event_bytes: tuple[int, ...] = (UNPADDED, 1024, 16 * 1024, 64 * 1024)
    """Each event's size on the wire: the token event, padded up to it."""
    small_recv_buffer: int = 16 * 1024
    """The client's SO_RCVBUF of the second run of each size."""
    tokens: int = 1000
    hold_s: float = 8.0
    """How long the client holds its connection without reading before it resets it."""


def workload(size: BackpressureSize) -> list[TraceRequest]:
    """One stream whose client takes its first event and then nothing until it goes."""
    client = Client(read=ReadMode.PER_EVENT, pause_s=10 * size.hold_s,
                    leave_after_s=size.hold_s, leave_how=LeaveHow.RST)
    return [TraceRequest("stuck", 0.0, PROMPT_TOKENS, size.tokens, client=client)]


def padding_for(event_bytes: int) -> int:
    """The `--event-padding` that makes a token event `event_bytes` long."""
    if event_bytes <= UNPADDED:
        return 0
    return max(1, event_bytes - UNPADDED - 4)  # ": " and two newlines around the padding


def run(bench: Bench, size: BackpressureSize = BackpressureSize()) -> Findings:
    model = bench.profile.overheads_model().transport_bytes
    quantities: list[Quantity] = []
    points = {}
    notes = []
    for event_bytes in size.event_bytes:
        padding = padding_for(event_bytes)
        wire = WIRE_FORMATS["twinstep"].padded(padding).token_bytes
        assumed = max(1, model // wire) * wire  # whole events, at least one
        with bench.server(f"backpressure-{wire}", policy="unbounded",
                          event_padding=padding) as target:
            for buffer, label in ((None, "OS buffers"),
                                  (size.small_recv_buffer, f"{size.small_recv_buffer // 1024} KiB "
                                                           "receive buffer")):
                with StatsWatch(target, interval_s=0.02) as stats:
                    c = bench.compare(target, f"{wire}-{buffer or 'os'}", workload(size),
                                      recv_buffer_bytes=buffer)
                absorbed, full = _absorbed(c, stats, size.hold_s)
                points[(wire, label)] = absorbed * wire
                at_least = "" if full else ", at least"
                quantities.append(Quantity(f"{wire} B events, {label}: absorbed (KB{at_least})",
                                           absorbed * wire / 1e3, assumed / 1e3,
                                           "252–328" if buffer is None else ""))
                if not full:
                    notes.append(f"{wire} B events, {label}: the server's writes never blocked "
                                 f"in {size.hold_s:g} s (at {absorbed} events made); the figure "
                                 "is what it sent, a lower bound.")

    def draw(fig):
        ax = fig.subplots()
        for label in dict.fromkeys(lbl for _, lbl in points):
            sizes = [w for w, lbl in points if lbl == label]
            ax.plot(sizes, [points[(w, label)] / 1e3 for w in sizes], "o-", label=f"live, {label}")
        sizes = sorted({w for w, _ in points})
        ax.plot(sizes, [max(1, model // w) * w / 1e3 for w in sizes], "s--",
                label="simulator's transport model")
        ax.set(xscale="log", yscale="log", xlabel="event size (bytes)",
               ylabel="absorbed before writes block (KB)", title="what a non-reading client absorbs")
        ax.grid(alpha=0.3)
        ax.legend()

    return Findings(
        title="Backpressure: what a client that reads nothing absorbs",
        setup=(f"One stream of up to {size.tokens} tokens whose client takes the first event, "
               f"then nothing, and resets the connection after {size.hold_s:g} s; policy "
               f"unbounded; events padded (`--event-padding`) to each size; once with the OS's "
               f"socket buffers, once with a {size.small_recv_buffer // 1024} KiB client "
               "receive buffer (SO_RCVBUF)."),
        quantities=quantities, draw=draw,
        notes=["Absorbed: the events the server had handed to the connection (made less those "
               "queued in the server, the one read included) when the client left, times the "
               "event's size; the server's writes had blocked once events queued. The simulator "
               "column is its transport model: one capacity for every connection "
               f"({model} bytes), rounded to whole events, whatever the client's buffer.",
               *notes])


def _absorbed(c, stats: StatsWatch, hold_s: float) -> tuple[int, bool]:
    """Events in the connection at the last look before the client left, and
    whether events were queued in the server then (the connection was full)."""
    made = [(t, n) for t, n in zip(c.live.series.time_s, c.live.series.tokens)]
    last = None
    for unix, sample in stats.samples:
        t = unix - c.started_unix
        if t < hold_s - 0.1:
            last = (t, sample["queued_events"])
    if last is None:
        return 0, False
    t, queued = last
    made_by = sum(n for step_t, n in made if step_t <= t)
    return max(0, made_by - queued), queued > 1
