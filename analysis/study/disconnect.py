"""Disconnect: many streams, about half of whose clients leave early, politely
(FIN) or not (RST). How soon a leave releases the stream's slot and blocks, how
much the engine made for nobody, and whether anything is left behind."""
from __future__ import annotations

import bisect
import random
from dataclasses import dataclass

from traces import Client, LeaveHow, TraceRequest

from ..compare import Comparison
from .bench import Bench, Findings, Quantity, cdf, ms, percentile, ratio
from .watch import CoreWatch, live_records

PROMPT_TOKENS = 16


@dataclass(frozen=True)
class DisconnectSize:
    streams: int = 48
    tokens: int = 32
    arrivals_s: float = 4.0
    """The streams arrive evenly over this span."""
    leave_after: tuple[int, int] = (2, 12)
    """A leaver reads between these many tokens (inclusive) before it goes."""
    seed: int = 7


def _step_end_after(step_ends, t: float | None) -> float | None:
    """The end of the first step that ended at `t` or after."""
    if t is None:
        return None
    i = bisect.bisect_left(step_ends, t)
    return step_ends[i] if i < len(step_ends) else None


def workload(size: DisconnectSize) -> list[TraceRequest]:
    """Every other stream leaves, alternately with FIN and with RST."""
    rng = random.Random(size.seed)
    trace = []
    for i in range(size.streams):
        client = Client()
        if i % 2:
            how = LeaveHow.FIN if i % 4 == 1 else LeaveHow.RST
            client = Client(leave_after_tokens=rng.randint(*size.leave_after), leave_how=how)
        trace.append(TraceRequest(f"d{i}", i * size.arrivals_s / size.streams, PROMPT_TOKENS,
                                  size.tokens, client=client))
    return trace


NOTICES = {"listen": "listening", "write": "write-only"}
"""The server's ways to learn a client left (`disconnect_notice`), as the table
names them."""


@dataclass
class Variant:
    """One server's run: the comparison, and each leaver's close-to-release time
    on each side, by request id."""

    comparison: Comparison
    release: dict[str, dict[str, float]]
    noticed: list[float]


def run_variant(bench: Bench, size: DisconnectSize, trace: list[TraceRequest],
                leavers: dict[str, LeaveHow], notice: str) -> Variant:
    watch = CoreWatch(list(leavers))
    with bench.server(f"disconnect-{notice}", disconnect_notice=notice) as target:
        c = bench.compare(target, f"disconnect-{notice}", trace, probe=watch)
    records = live_records(c)
    release = {"live": {}, "sim": {}}
    for side in ("live", "sim"):
        for o in getattr(c, side).outcomes:
            if o.id not in leavers or o.left_s is None:
                continue
            released = (records[o.id]["finish_unix"] if side == "live"
                        else _step_end_after(c.sim.series.time_s, watch.released_s.get(o.id)))
            if released is not None:
                release[side][o.id] = released - o.left_s
    noticed = [records[o.id]["left_unix"] - o.left_s for o in c.live.outcomes
               if o.id in leavers and o.left_s is not None
               and records[o.id]["left_unix"] is not None]
    return Variant(c, release, noticed)


def run(bench: Bench, size: DisconnectSize = DisconnectSize()) -> Findings:
    trace = workload(size)
    leavers = {r.id: r.client.leave_how for r in trace if r.client.leaves}
    variants = {notice: run_variant(bench, size, trace, leavers, notice) for notice in NOTICES}
    quantities = []
    for notice, label in NOTICES.items():
        quantities += _quantities(bench, variants[notice], leavers, label,
                                  write_only=notice == "write")
    listening, write_only = variants["listen"].comparison, variants["write"].comparison
    quantities.append(Quantity("write-only total time over listening's",
                               ratio(write_only.live.summary.makespan_s,
                                     listening.live.summary.makespan_s),
                               ratio(write_only.sim.summary.makespan_s,
                                     listening.sim.summary.makespan_s), "1.47"))

    def draw(fig):
        axes = fig.subplots(1, 2, sharey=True)
        for ax, (notice, label) in zip(axes, NOTICES.items()):
            release = variants[notice].release
            for side, style in (("live", "-"), ("sim", "--")):
                for how in (LeaveHow.FIN, LeaveHow.RST):
                    cdf(ax, [ms(x) for k, x in release[side].items() if leavers[k] is how],
                        linestyle=style, label=f"{how.value} {side}")
            ax.set(xlabel="client's close to the engine's release (ms)",
                   title=f"close to release, {label}")
            ax.grid(alpha=0.3)
            ax.legend()
        axes[0].set_ylabel("fraction of leavers")

    return Findings(
        title="Disconnect: half the clients leave early",
        setup=(f"{size.streams} streams of {size.tokens} tokens arriving over "
               f"{size.arrivals_s} s (the reference: 300); every other one leaves after "
               f"{size.leave_after[0]} to {size.leave_after[1]} tokens, alternately with FIN "
               f"and RST; max batch {listening.server.scheduler['max_batch']}. Run against a "
               "server that listens for the disconnect, then against one whose streams learn "
               "of it only when a write finds the connection gone "
               "(`--disconnect-notice write`)."),
        quantities=quantities, draw=draw,
        notes=["Close to release: from the client's close (its clock) to the end of the step "
               "whose plan released the sequence, when its finish reaches the streams (the "
               "live server's record of the request; in the simulator, the first step end "
               "after the core, looked at every 5 ms, no longer held it). A cancel takes "
               "effect at the next step boundary: the release waits for the step under way, "
               "and is told at the end of the one after.",
               "Write-only: the write that fails is that of the stream's next event, made "
               "by the step after the close, so the engine makes at least one more token "
               "for nobody and the release comes a step or two later than listening's. "
               "uvicorn itself returns from a write to a gone client as if it had written; "
               "the server asks its transport whether the connection is closing after "
               "each write, as a write to a closed socket would fail. Such a server "
               "learns of the leave only at that write, so its own count of tokens made "
               "after the leave starts there: the tokens made per token read compare its "
               "waste with the simulator's.",
               "Blocks leaked: the live server's blocks reserved once the replay settled; the "
               "simulator's replay refuses to end with any block reserved.",
               "Events dropped after close: events the engine made for streams already closed "
               "(live: /stats dropped_events over the run)."])


def _quantities(bench: Bench, variant: Variant, leavers: dict[str, LeaveHow], label: str,
                write_only: bool) -> list[Quantity]:
    c, release = variant.comparison, variant.release

    def by_how(side: str, how: LeaveHow | None, q: float) -> float | None:
        return ms(percentile([v for k, v in release[side].items()
                              if how is None or leavers[k] is how], q))

    def made_per_read(side: str) -> float | None:
        left = [o for o in getattr(c, side).outcomes if o.id in leavers]
        return ratio(sum(o.tokens_generated for o in left), sum(o.tokens_read for o in left))

    live, sim = c.live.summary, c.sim.summary
    leaked = None if c.stats_after is None else c.stats_after["blocks_reserved"]

    def reference(listening: str, written: str) -> str:
        return written if write_only else listening

    quantities = [
        Quantity(f"{label}: leavers", sum(o.left_s is not None for o in c.live.outcomes),
                 sum(o.left_s is not None for o in c.sim.outcomes))]
    if not write_only:
        # a write-only server counts its waste from the failed write, not the close
        quantities += [
            Quantity(f"{label}: disconnect noticed by the server p50 (ms)",
                     ms(percentile(variant.noticed, 50)),
                     ms(bench.profile.overheads_model().disconnect_detect_s)),
            Quantity(f"{label}: tokens made after their client left", live.wasted_tokens,
                     sim.wasted_tokens)]
    return quantities + [
        Quantity(f"{label}: close to release p50, FIN (ms)", by_how("live", LeaveHow.FIN, 50),
                 by_how("sim", LeaveHow.FIN, 50), reference("10–19", "~2,000")),
        Quantity(f"{label}: close to release p50, RST (ms)", by_how("live", LeaveHow.RST, 50),
                 by_how("sim", LeaveHow.RST, 50), reference("10–19", "~2,000")),
        Quantity(f"{label}: close to release p99, all (ms)", by_how("live", None, 99),
                 by_how("sim", None, 99), reference("max 34.5", "")),
        Quantity(f"{label}: leavers' tokens made per token read", made_per_read("live"),
                 made_per_read("sim"), reference("1.4", "5.2")),
        Quantity(f"{label}: total time (s)", live.makespan_s, sim.makespan_s),
        Quantity(f"{label}: streams read to their end", live.completed, sim.completed),
        Quantity(f"{label}: blocks leaked", leaked, 0, "0"),
        Quantity(f"{label}: events dropped after close", c.live.events_discarded,
                 c.sim.events_discarded),
    ]
