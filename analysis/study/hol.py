"""Head-of-line blocking: five short requests sent just after one long stream,
over one HTTP/1.1 connection (each waits for the one before it to end), over six
connections, and as six streams of one HTTP/2 connection (interleaved)."""
from __future__ import annotations

from dataclasses import dataclass

from traces import TraceRequest

from .bench import NOT_MODELLED, Bench, Findings, Quantity, ms, percentile
from .timed_client import Timing, over_one_client

PROMPT_TOKENS = 16


@dataclass(frozen=True)
class HolSize:
    long_tokens: int = 48
    short: int = 5
    short_tokens: int = 4
    behind_s: float = 0.05
    """The short requests are sent this long after the long one."""


def workload(size: HolSize, session: str | None) -> list[TraceRequest]:
    """The long request, then the short ones; in one `session` they are sent one
    after another, as over one HTTP/1.1 connection."""
    trace = [TraceRequest("long", 0.0, PROMPT_TOKENS, size.long_tokens, session=session)]
    return trace + [TraceRequest(f"short-{i}", size.behind_s, PROMPT_TOKENS, size.short_tokens,
                                 session=session) for i in range(size.short)]


def run(bench: Bench, size: HolSize = HolSize()) -> Findings:
    open_loop = workload(size, session=None)
    with bench.server("hol", http2=True) as target:
        serial = bench.compare(target, "one-connection", workload(size, session="connection"))
        six = bench.compare(target, "six-connections", open_loop)
        key = target.access.replay_options()["api_key"]
        h1 = over_one_client(target.url, open_loop, connections=1, http2=False, api_key=key)
        h2 = over_one_client(target.url, open_loop, connections=1, http2=True, api_key=key)

    def shorts(outcomes) -> list[float]:
        return [o.first_token_client_s for o in outcomes
                if o.id.startswith("short") and o.first_token_client_s is not None]

    def timed(timings: dict[str, Timing]) -> list[float]:
        return [t.first_token_s for k, t in timings.items()
                if k.startswith("short") and t.first_token_s is not None]

    def long_end(outcomes) -> float | None:
        return next(o.finish_s for o in outcomes if o.id == "long")

    firsts = {"one HTTP/1.1 connection": (timed(h1), shorts(serial.sim.outcomes)),
              "six HTTP/1.1 connections": (shorts(six.live.outcomes), shorts(six.sim.outcomes)),
              "one HTTP/2 connection": (timed(h2), None)}
    quantities = []
    for label, (live, sim) in firsts.items():
        reference = ("wait for the whole long stream" if label.startswith("one HTTP/1.1")
                     else "interleaved" if "HTTP/2" in label else "")
        quantities += [
            Quantity(f"{label}: short requests' first token p50 (ms)", ms(percentile(live, 50)),
                     NOT_MODELLED if sim is None else ms(percentile(sim, 50)), reference),
            Quantity(f"{label}: short requests' first token max (ms)", ms(max(live, default=None)),
                     NOT_MODELLED if sim is None else ms(max(sim, default=None)))]
    quantities += [
        Quantity("one HTTP/1.1 connection: the long stream ends (ms)", ms(h1["long"].end_s),
                 ms(long_end(serial.sim.outcomes))),
        Quantity("six HTTP/1.1 connections: the long stream ends (ms)",
                 ms(long_end(six.live.outcomes)), ms(long_end(six.sim.outcomes))),
        Quantity("one HTTP/2 connection: the long stream ends (ms)", ms(h2["long"].end_s),
                 NOT_MODELLED),
        Quantity("sent one after another on fresh connections: short first token p50 (ms)",
                 ms(percentile(shorts(serial.live.outcomes), 50)),
                 ms(percentile(shorts(serial.sim.outcomes), 50))),
    ]

    def draw(fig):
        ax = fig.subplots()
        for n, (label, (live, sim)) in enumerate(firsts.items()):
            ax.plot([ms(x) for x in sorted(live)], [n] * len(live), "o", color=f"C{n}",
                    label=f"{label} live")
            if sim is not None:
                ax.plot([ms(x) for x in sorted(sim)], [n + 0.15] * len(sim), "x", color=f"C{n}",
                        label=f"{label} sim")
        ax.axvline(ms(h1["long"].end_s), color="grey", linestyle=":", label="long stream ends (one HTTP/1.1)")
        ax.set(xlabel="short request's first token (ms from the start)", yticks=[],
               title="short requests behind a long one")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)

    return Findings(
        title="Head-of-line blocking: short requests behind a long stream",
        setup=(f"A stream of {size.long_tokens} tokens, then {size.short} requests of "
               f"{size.short_tokens} tokens {size.behind_s * 1e3:.0f} ms later, over one HTTP/1.1 "
               "connection (an httpx client of one connection), six connections (the load "
               "generator), and one HTTP/2 connection (httpx, h2c with prior knowledge; the "
               "server runs --http2). Times from the long request's start."),
        quantities=quantities, draw=draw,
        notes=["The simulator has no connections: one HTTP/1.1 connection is a session whose "
               "requests are sent one after another (each when the one before has ended); "
               "HTTP/2's interleaving of streams on one connection is not modelled.",
               "The last row sends the same requests one after another on fresh connections "
               "(the load generator's sessions), the simulator's picture of one connection."])
