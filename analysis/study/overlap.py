"""Overlap: what batching many streams into one step buys. N streams started at
once, for growing N: throughput, TTFT and the gap between tokens; the most of them
again with their prompts prefilled in passes (`--prefill-pass-tokens`), each pass's
first tokens sent as it ends rather than with the step; then short requests
joining while streams run, against the same requests on an idle server."""
from __future__ import annotations

from dataclasses import dataclass

from traces import TraceRequest

from .bench import Bench, Findings, Quantity, ms, percentile, ratio

LEVELS = (1, 2, 4, 8, 16, 32)
PROMPT_TOKENS = 16


@dataclass(frozen=True)
class OverlapSize:
    levels: tuple[int, ...] = LEVELS
    tokens: int = 32
    """Tokens each stream makes."""
    running: tuple[int, ...] = (8, 24)
    """Streams already running when the joiners come."""
    running_tokens: int = 64
    joiners: int = 12
    joiner_tokens: int = 4
    joiner_first_s: float = 1.0
    """When the first joiner comes after the running streams start."""
    joiner_every_s: float = 0.3
    pass_tokens: int = 4 * PROMPT_TOKENS
    """Prompt tokens a prefill pass takes in the run with passes: four prompts."""


def simultaneous(n: int, tokens: int) -> list[TraceRequest]:
    return [TraceRequest(f"s{n}-{i}", 0.0, PROMPT_TOKENS, tokens) for i in range(n)]


def joining(running: int, size: OverlapSize) -> list[TraceRequest]:
    """`running` long streams at 0, then the joiners one after another."""
    base = [TraceRequest(f"r{running}-{i}", 0.0, PROMPT_TOKENS, size.running_tokens)
            for i in range(running)]
    first = size.joiner_first_s if running else 0.0
    return base + [TraceRequest(f"j{running}-{i}", first + i * size.joiner_every_s,
                                PROMPT_TOKENS, size.joiner_tokens) for i in range(size.joiners)]


def run(bench: Bench, size: OverlapSize = OverlapSize()) -> Findings:
    top = max(max(size.levels), max(size.running, default=0) + size.joiners)
    by_level = {}
    joined = {}
    with bench.server("overlap", max_batch=top) as target:
        for n in size.levels:
            by_level[n] = bench.compare(target, f"streams-{n}", simultaneous(n, size.tokens))
        for running in (0, *size.running):
            c = bench.compare(target, f"joiners-{running}", joining(running, size))
            joined[running] = {side: _joiner_ttft(getattr(c, side).outcomes)
                               for side in ("live", "sim")}
    most = max(size.levels)
    with bench.server("overlap-passes", max_batch=top,
                      prefill_pass_tokens=size.pass_tokens) as target:
        passes = bench.compare(target, f"streams-{most}-passes", simultaneous(most, size.tokens))
    one = by_level[size.levels[0]]
    quantities = []
    for n, c in by_level.items():
        live, sim = c.live.summary, c.sim.summary
        label = f"{n} stream{'s' if n > 1 else ''}"
        quantities += [
            Quantity(f"{label}: tokens/s", live.throughput_tok_s, sim.throughput_tok_s),
            Quantity(f"{label}: TTFT p50 (ms)", ms(live.ttft_client_p50_s),
                     ms(sim.ttft_client_p50_s), "441 at 32" if n == 32 else ""),
            Quantity(f"{label}: TTFT p99 (ms)", ms(live.ttft_client_p99_s),
                     ms(sim.ttft_client_p99_s), "441 at 32" if n == 32 else ""),
            Quantity(f"{label}: inter-token gap p50 (ms)", ms(live.gap_p50_s),
                     ms(sim.gap_p50_s), {1: "10", 32: "17"}.get(n, ""))]
        if c is not one:
            quantities += [
                Quantity(f"{label}: throughput / 1 stream's",
                         ratio(live.throughput_tok_s, one.live.summary.throughput_tok_s),
                         ratio(sim.throughput_tok_s, one.sim.summary.throughput_tok_s),
                         "14–15× at 32" if n == 32 else ""),
                Quantity(f"{label}: step / 1 stream's step",
                         ratio(live.gap_p50_s, one.live.summary.gap_p50_s),
                         ratio(sim.gap_p50_s, one.sim.summary.gap_p50_s),
                         "1.5× at 32" if n == 32 else "")]
    label = f"{most} streams, first tokens by pass of {size.pass_tokens} prompt tokens"
    live, sim = passes.live.summary, passes.sim.summary
    quantities += [
        Quantity(f"{label}: TTFT p50 (ms)", ms(live.ttft_client_p50_s), ms(sim.ttft_client_p50_s)),
        Quantity(f"{label}: TTFT p99 (ms)", ms(live.ttft_client_p99_s), ms(sim.ttft_client_p99_s)),
        Quantity(f"{label}: tokens/s", live.throughput_tok_s, sim.throughput_tok_s)]
    reference = {0: "16", 8: "41", 24: "47"}
    for running, ttft in joined.items():
        label = "idle server" if not running else f"{running} streams running"
        quantities.append(Quantity(f"joiners' TTFT p50 (ms), {label}", ms(ttft["live"]),
                                   ms(ttft["sim"]), reference.get(running, "")))

    def draw(fig):
        left, right = fig.subplots(1, 2)
        levels = list(by_level)
        for side, style in (("live", "o-"), ("sim", "s--")):
            left.plot(levels, [getattr(by_level[n], side).summary.throughput_tok_s for n in levels],
                      style, label=side)
            right.plot(levels, [ms(getattr(by_level[n], side).summary.gap_p50_s) for n in levels],
                       style, label=side)
        left.set(xscale="log", xlabel="simultaneous streams", ylabel="tokens/s", title="throughput")
        right.set(xscale="log", xlabel="simultaneous streams", ylabel="ms",
                  title="inter-token gap p50")
        for ax in (left, right):
            ax.set_xticks(levels, [str(n) for n in levels])
            ax.grid(alpha=0.3)
            ax.legend()

    return Findings(
        title="Overlap: many streams in one step",
        setup=(f"{', '.join(map(str, size.levels))} streams started at once, prompts of "
               f"{PROMPT_TOKENS} tokens, {size.tokens} tokens each, one server with max batch "
               f"{top}; then {size.joiners} requests of {size.joiner_tokens} tokens arriving "
               f"{size.joiner_every_s} s apart from {size.joiner_first_s} s while "
               f"{' or '.join(map(str, size.running))} streams of {size.running_tokens} tokens "
               f"run, and on an idle server."),
        quantities=quantities, draw=draw,
        notes=["The step ratio is the gap p50 at N streams over the gap p50 of one: a decode "
               "step makes one token for every stream, so the gap is the step's length.",
               "TTFT counts the prefill of every prompt that arrived together, in one step; "
               f"with passes of {size.pass_tokens} prompt tokens, a prompt's first token "
               "leaves when its own pass ends.",
               f"The profile's step costs were fitted on batches up to {bench.profile.max_batch}; "
               "larger batches are extrapolated by the simulator's cost model."])


def _joiner_ttft(outcomes) -> float | None:
    return percentile([o.ttft_client_s for o in outcomes
                       if o.id.startswith("j") and o.ttft_client_s is not None], 50)
