"""The matrix's verdicts as one table (markdown and text), a heat map of each
cell's errors against their bounds, and `validate.json`."""
from __future__ import annotations

import json
from pathlib import Path

from .verdict import COUNTED, FIGURES, CellVerdict, Judged, Repriced

SHORT = {"ttft_client_p50_s": "TTFT p50", "ttft_client_p99_s": "TTFT p99", "gap_p99_s": "gap p99",
         "stall_p99_s": "stall p99", "throughput_tok_s": "throughput",
         "wasted_tokens": "wasted tokens", "preemptions": "preemptions"}


def tally(verdicts: list[CellVerdict]) -> str:
    """How many cells the simulator holds (of those where a request was served), how
    many live holds against itself, and how many the simulator holds at the host's
    pace, as the price checks read it and as the runs' own steps did."""
    decided = [v.ok for v in verdicts if v.ok is not None]
    line = f"{sum(decided)} of {len(decided)} cells within bounds"
    asides = []
    unserved = [f"{v.trace} × {v.settings}" for v in verdicts if v.ok is None]
    if unserved:
        asides.append(f"not judged, no request served on either side: {', '.join(unserved)}")
    judged = [v.live_ok for v in verdicts if v.live_ok is not None]
    if judged:
        asides.append(f"each live run against the median of the others: {sum(judged)} of "
                      f"{len(judged)}")
    for what, oks in (("the price checks' pace", [v.ok_at_check for v in verdicts]),
                      ("the pace of the runs' own steps", [v.ok_at_pace for v in verdicts])):
        paced = [ok for ok in oks if ok is not None]
        if paced:
            asides.append(f"at {what}: {sum(paced)} of {len(paced)}")
    return line + (f" ({'; '.join(asides)})" if asides else "")


def _pace(repriced: Repriced) -> str:
    """The cell's pace, and the runs' range beside it."""
    known = [p for p in repriced.paces if p is not None]
    if not known:
        return "-"
    if len(known) == 1:
        return f"{known[0]:.2f}"
    return f"{repriced.pace:.2f} ({min(known):.2f}–{max(known):.2f})"


def _yes(ok: bool | None) -> str:
    return "-" if ok is None else "yes" if ok else "**no**"


def _cell(j: Judged) -> str:
    """The simulator's error, live's own spread beside it, and a mark when over."""
    if j.error is None:
        return "-"
    if j.figure in COUNTED:
        text = f"{j.error:+g} (live ±{j.spread / 2:g})"
    else:
        text = f"{j.error:+.1%} (live ±{j.spread / 2:.0%})"
    return f"**{text}**" if j.ok is False else text


def markdown(verdicts: list[CellVerdict]) -> str:
    head = ["trace", "settings", "runs", *(SHORT[f] for f in FIGURES), "counts", "within",
            "live within", "checked pace", "within at checked pace", "own pace",
            "within at own pace"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in verdicts:
        lines.append("| " + " | ".join([v.trace, v.settings, str(v.runs),
                                         *(_cell(j) for j in v.judged),
                                         "equal" if v.counts_agree else "**differ**",
                                         _yes(v.ok), _yes(v.live_ok), _pace(v.at_check),
                                         _yes(v.ok_at_check), _pace(v.at_pace),
                                         _yes(v.ok_at_pace)]) + " |")
    return "\n".join(lines)


def write_validation(verdicts: list[CellVerdict], out_dir: Path, header: str) -> list[Path]:
    """`validate.md` (the header, the table, the tally, the features beyond the
    fit), `validate.json` and `validate.png`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    beyond = [f"* {v.trace} × {v.settings}: {line}" for v in verdicts for line in v.beyond_fit]
    md = [f"# The simulator against a matrix of live runs\n\n{header}\n", markdown(verdicts),
          f"\n{tally(verdicts)}. Each error is the simulator's against the median of the live "
          "runs; beside it, half of live's own spread over its runs. Bounds: TTFT p50 ±10%, "
          "TTFT p99 and stall p99 ±20%, throughput ±5%, wasted tokens ± the leavers, "
          "preemptions equal (gap p99 unbounded); requests completed and left, and tokens "
          "read, equal on both sides (`counts`). `live within`: every live run, in the "
          "simulator's place, within the same bounds of the median of the other runs; where "
          "it is not, the bounds are finer than this host repeats. `checked pace`: the "
          "seconds the steps of a short fixed load (the price check) took, run on the cell's "
          "server before and after each live run, over the profile's price of the same steps "
          "(1.10: the host ran a tenth slower than at calibration): all the cell's checks "
          "together, and the runs' range; `within at checked pace`: the simulator judged "
          "again with its step prices times that pace, as a user who checks the host before "
          "a what-if would run it. `own pace`: the same ratio for each live run's own steps "
          "(the runs' median, and their range), which no profile can know beforehand; "
          "`within at own pace` tells the model's errors from the host's.",
          ""]
    if beyond:
        md += ["Where the simulated replay went past the profile's fit:", *beyond, ""]
    md.append("![errors](validate.png)")
    paths = [out_dir / "validate.md", out_dir / "validate.json", out_dir / "validate.png"]
    paths[0].write_text("\n".join(md) + "\n")
    paths[1].write_text(json.dumps({"header": header, "tally": tally(verdicts),
                                    "cells": [v.as_dict() for v in verdicts]}, indent=2) + "\n")
    _heat_map(verdicts, paths[2])
    return paths


def _share(j: Judged) -> float:
    """|error| as a share of its bound (an error over a zero bound is twice over);
    NaN where nothing is judged."""
    if j.ok is None:
        return float("nan")
    if not j.bound:
        return 0.0 if j.ok else 2.0
    return abs(j.error) / j.bound


def _heat_map(verdicts: list[CellVerdict], path: Path) -> None:
    """Each cell's errors as a share of their bounds: below 1 is within. A cell
    where a live run misses the bounds against the others says so."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    share = np.array([[_share(j) for j in v.judged] for v in verdicts],
                     dtype=float).reshape(len(verdicts), len(FIGURES))
    fig, ax = plt.subplots(figsize=(1.3 * len(FIGURES) + 3, 0.45 * len(verdicts) + 1.5))
    image = ax.imshow(share, cmap="RdYlGn_r", vmin=0, vmax=2, aspect="auto")
    ax.set_xticks(range(len(FIGURES)), [SHORT[f] for f in FIGURES], rotation=30, ha="right")
    ax.set_yticks(range(len(verdicts)), [f"{v.trace} × {v.settings}"
                                         + (" (live over too)" if v.live_ok is False else "")
                                         for v in verdicts])
    for row, v in enumerate(verdicts):
        for col, j in enumerate(v.judged):
            if j.error is not None:
                text = f"{j.error:+.0f}" if j.figure in COUNTED else f"{j.error:+.0%}"
                ax.text(col, row, text, ha="center", va="center", fontsize=8)
    fig.colorbar(image, ax=ax, label="|error| / bound")
    ax.set_title("simulated against the median of live runs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
