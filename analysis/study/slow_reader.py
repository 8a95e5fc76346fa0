"""Slow reader: one client that reads far slower than the server makes tokens,
among streams read at once, under each backlog policy: what the healthy streams
pay, how long the slow one holds its slot and blocks, how much waits for it, and
when it hears `slow_client`. With `fill`, every slot holds a slow reader and fast
requests arrive behind them: how long they wait under pause and under drop."""
from __future__ import annotations

from dataclasses import dataclass

from scheduler import BACKLOG_POLICIES
from sim.wire import WIRE_FORMATS
from traces import Client, ReadMode, TraceRequest, summarize

from .bench import Bench, Findings, Quantity, cdf, ms, percentile
from .watch import CoreWatch, StatsWatch, live_records

PROMPT_TOKENS = 16
DROPS = ("drop", "pause_then_drop")
"""The policies that end a stalled stream, and with it the reader of an ended one:
they run with the short stall timeout, the others with a long one."""


@dataclass(frozen=True)
class SlowReaderSize:
    streams: int = 8
    """In the batch, the slow reader among them (with `fill`: slow readers all)."""
    tokens: int = 32
    pause_s: float = 1.0
    """The slow reader's pause after each event it takes."""
    event_padding: int = 256 * 1024
    """Bytes of padding after every event: loopback's buffers then hold a few
    events rather than the whole stream."""
    max_queued: int = 8
    stall_timeout_s: float = 0.4
    """Of the policies that drop: shorter than the reader's pause, so a full
    connection counts as a stall."""
    patient_stall_timeout_s: float = 60.0
    """Of the others: no reader of an ended stream is cut while it reads."""
    fast: int = 8
    """With `fill`: fast requests arriving once the slow readers have their slots."""
    fast_arrival_s: float = 1.0
    fast_tokens: int = 8


def workload(size: SlowReaderSize, slow: int, fast: int = 0) -> list[TraceRequest]:
    """`slow` slow readers and `size.streams - slow` instant ones at 0, then `fast`
    short requests read at once."""
    reader = Client(read=ReadMode.PER_EVENT, pause_s=size.pause_s)
    trace = [TraceRequest(f"slow-{i}", 0.0, PROMPT_TOKENS, size.tokens, client=reader)
             for i in range(slow)]
    trace += [TraceRequest(f"healthy-{i}", 0.0, PROMPT_TOKENS, size.tokens)
              for i in range(size.streams - slow)]
    return trace + [TraceRequest(f"fast-{i}", size.fast_arrival_s, PROMPT_TOKENS,
                                 size.fast_tokens) for i in range(fast)]


def _server_settings(size: SlowReaderSize, policy: str) -> dict:
    stall = size.stall_timeout_s if policy in DROPS else size.patient_stall_timeout_s
    return dict(policy=policy, max_batch=size.streams, max_queued=size.max_queued,
                stall_timeout_s=stall, event_padding=size.event_padding)


def run(bench: Bench, size: SlowReaderSize = SlowReaderSize(),
        policies: tuple[str, ...] = tuple(BACKLOG_POLICIES)) -> Findings:
    token_bytes = WIRE_FORMATS["twinstep"].padded(size.event_padding).token_bytes
    in_transport = max(1, bench.profile.overheads_model().transport_bytes // token_bytes)
    quantities: list[Quantity] = []
    ends: dict[str, str] = {}
    for policy in policies:
        with bench.server(f"slow-reader-{policy}", **_server_settings(size, policy)) as target:
            if not quantities:
                alone = bench.compare(target, "alone", workload(size, slow=0))
                quantities += [
                    Quantity("no slow reader: streams finish (s)", _finish(alone.live.outcomes),
                             _finish(alone.sim.outcomes), "1"),
                    Quantity("no slow reader: gap p99 (ms)", ms(alone.live.summary.gap_p99_s),
                             ms(alone.sim.summary.gap_p99_s), "19")]
            watch = CoreWatch(["slow-0"])
            with StatsWatch(target) as stats:
                c = bench.compare(target, policy, workload(size, slow=1), probe=watch)
        live_slow = next(o for o in c.live.outcomes if o.id == "slow-0")
        sim_slow = next(o for o in c.sim.outcomes if o.id == "slow-0")
        record = live_records(c)["slow-0"]
        held_live = record["finish_unix"] - record["admitted_unix"]
        held_sim = watch.released_s["slow-0"] - sim_slow.admitted_s
        queued_sim = _peak_queued(watch.made.get("slow-0", []), sim_slow.token_times_s,
                                  in_transport)
        queued_live = stats.peak("queued_events")
        ref = REFERENCE.get(policy, {})
        quantities += [
            Quantity(f"{policy}: healthy streams finish (s)", _finish(_healthy(c.live.outcomes)),
                     _finish(_healthy(c.sim.outcomes)), ref.get("finish", "")),
            Quantity(f"{policy}: healthy gap p99 (ms)",
                     ms(summarize(_healthy(c.live.outcomes)).gap_p99_s),
                     ms(summarize(_healthy(c.sim.outcomes)).gap_p99_s), ref.get("gap", "")),
            Quantity(f"{policy}: slow stream's slot and blocks held (s)", held_live, held_sim,
                     ref.get("held", "")),
            Quantity(f"{policy}: peak events queued for it", queued_live, queued_sim),
            Quantity(f"{policy}: peak bytes queued for it (MB)", queued_live * token_bytes / 1e6,
                     queued_sim * token_bytes / 1e6, ref.get("bytes", "")),
            Quantity(f"{policy}: slow_client ends the reader's stream at (s)",
                     _slow_client_s(live_slow), _slow_client_s(sim_slow), ref.get("told", "")),
            Quantity(f"{policy}: the slow reader's tokens", live_slow.tokens_read,
                     sim_slow.tokens_read),
        ]
        ends[policy] = (f"{policy}: the slow reader's stream ended {_end(live_slow)} live, "
                        f"{_end(sim_slow)} simulated.")

    def draw(fig):
        figures = {q.name: q for q in quantities}
        policies_run = list(ends)
        for ax, what, title in zip(fig.subplots(1, 2),
                                   ("healthy streams finish (s)",
                                    "slow stream's slot and blocks held (s)"),
                                   ("healthy streams finish", "the slow stream holds its slot")):
            for offset, side in ((-0.2, "live"), (0.2, "sim")):
                values = [getattr(figures[f"{p}: {what}"], side) or 0.0 for p in policies_run]
                ax.bar([i + offset for i in range(len(policies_run))], values, 0.4, label=side)
            ax.set_xticks(range(len(policies_run)), policies_run, fontsize=8)
            ax.set(ylabel="s", title=title)
            ax.grid(alpha=0.3, axis="y")
            ax.legend()

    return Findings(
        title="Slow reader: one among many, by backlog policy",
        setup=(f"{size.streams} streams of {size.tokens} tokens started at once, one read with "
               f"a {size.pause_s} s pause after each event, the others at once; events padded "
               f"to {token_bytes} bytes; max queued {size.max_queued} (pause), stall timeout "
               f"{size.stall_timeout_s} s (drop, pause_then_drop) else "
               f"{size.patient_stall_timeout_s} s. One server per policy."),
        quantities=quantities, draw=draw,
        notes=_notes(size, token_bytes, in_transport) + list(ends.values()))


def run_fill(bench: Bench, size: SlowReaderSize = SlowReaderSize(),
             policies: tuple[str, ...] = ("pause", "drop")) -> Findings:
    """Every slot taken by a slow reader; fast requests arrive behind them."""
    token_bytes = WIRE_FORMATS["twinstep"].padded(size.event_padding).token_bytes
    quantities: list[Quantity] = []
    waits = {}
    for policy in policies:
        with bench.server(f"slow-fill-{policy}", **_server_settings(size, policy)) as target:
            c = bench.compare(target, policy, workload(size, slow=size.streams, fast=size.fast))
        sides = {side: _fast_waits(getattr(c, side).outcomes) for side in ("live", "sim")}
        waits[policy] = sides
        step = c.sim.summary.gap_p50_s or 0.0
        quantities += [
            Quantity(f"{policy}: fast requests that waited for a slot",
                     _waited(sides["live"], step), _waited(sides["sim"], step)),
            Quantity(f"{policy}: their wait p50 (s)", percentile(sides["live"], 50),
                     percentile(sides["sim"], 50)),
            Quantity(f"{policy}: their wait max (s)", max(sides["live"], default=None),
                     max(sides["sim"], default=None)),
            Quantity(f"{policy}: fast TTFT p50 (s)", _fast_ttft(c.live.outcomes),
                     _fast_ttft(c.sim.outcomes)),
            Quantity(f"{policy}: slow readers' streams ended slow_client by the engine",
                     sum(r["finish_reason"] == "slow_client" for r in live_records(c).values()),
                     sum(o.finish_reason == "slow_client" for o in c.sim.outcomes)),
        ]

    def draw(fig):
        ax = fig.subplots()
        for n, (policy, sides) in enumerate(waits.items()):
            for side, style in (("live", "-"), ("sim", "--")):
                cdf(ax, sides[side], color=f"C{n}", linestyle=style, label=f"{policy} {side}")
        ax.set(xlabel="fast request's wait for a slot (s)", ylabel="fraction",
               title="fast requests behind a batch of slow readers")
        ax.grid(alpha=0.3)
        ax.legend()

    return Findings(
        title="Slow readers fill the batch: fast requests behind them",
        setup=(f"{size.streams} slow readers (a {size.pause_s} s pause after each event) take "
               f"every slot ({size.tokens} tokens each); {size.fast} fast requests of "
               f"{size.fast_tokens} tokens arrive at {size.fast_arrival_s} s. Events padded to "
               f"{token_bytes} bytes; pause above {size.max_queued} queued events, drop after a "
               f"{size.stall_timeout_s} s stall."),
        quantities=quantities, draw=draw,
        notes=["A fast request waited when its admission came more than one step (the "
               "simulated gap p50) after its arrival. The reference argues this case "
               "without measuring it: pause keeps every slot for the slow readers, drop "
               "frees them once the readers' connections are full."])


REFERENCE = {
    "naive": {"finish": "28 (1 alone)", "gap": "~1000 (19 alone)"},
    "unbounded": {"held": "~1", "bytes": "the cost is memory"},
    "pause": {"held": "21–25"},
    "drop": {"held": "0.6–0.8", "told": "18.7–19.7"},
}


def _notes(size: SlowReaderSize, token_bytes: int, in_transport: int) -> list[str]:
    return [
        f"Loopback's socket buffers hold megabytes: events are padded to {token_bytes} bytes "
        f"(`--event-padding {size.event_padding}`) so that the connection holds about "
        f"{in_transport} of them (the simulator's transport model) and the rest queue in "
        "the server, as 64 KiB events did on the reference's 200-token streams.",
        "Events queued: the live server's `queued_events` (/stats, read every 50 ms); the "
        "simulated ones are the tokens made and not yet read, less what the connection "
        "holds. Bytes: events times the padded event's size.",
        "Slot and blocks held: from admission to the engine's release (the live server's "
        "record of the request; the simulated core looked at every 5 ms).",
        "slow_client ends the reader's stream at: when the reader read the final "
        "`slow_client` event or, taking nothing for the stall timeout after the drop, had "
        "its connection cut (it sees the connection break; the server's record of the "
        "request, which the live side takes, says slow_client); `-` when its stream did not "
        "end with slow_client.",
        f"The stall timeout ({size.stall_timeout_s} s under drop and pause_then_drop) is also "
        "how long the live server lets the reader of an ended stream take nothing before it "
        "cuts the connection: a reader that pauses longer than that between events is cut "
        "before it reads slow_client.",
    ]


def _end(outcome) -> str:
    reason = outcome.finish_reason or "without a final event"
    at = "" if outcome.finish_s is None else f" at {outcome.finish_s:.1f} s"
    return f"{reason} after {outcome.tokens_read} tokens{at}"


def _healthy(outcomes):
    return [o for o in outcomes if o.id.startswith("healthy")]


def _finish(outcomes) -> float | None:
    times = [o.finish_s for o in outcomes if o.finish_s is not None]
    return max(times) if times else None


def _slow_client_s(outcome) -> float | None:
    return outcome.finish_s if outcome.finish_reason == "slow_client" else None


def _peak_queued(made: list[tuple[float, int]], read_times: list[float], in_transport: int) -> int:
    """The most tokens made and not yet read, beyond what the connection holds."""
    peak, read = 0, 0
    for t, n in made:
        while read < len(read_times) and read_times[read] <= t:
            read += 1
        peak = max(peak, n - read - in_transport)
    return peak


def _fast_waits(outcomes) -> list[float]:
    return [o.admitted_s - o.arrival_s for o in outcomes
            if o.id.startswith("fast") and o.admitted_s is not None]


def _waited(waits: list[float], step_s: float) -> int:
    return sum(1 for w in waits if w > step_s)


def _fast_ttft(outcomes) -> float | None:
    return percentile([o.ttft_client_s for o in outcomes
                       if o.id.startswith("fast") and o.ttft_client_s is not None], 50)
