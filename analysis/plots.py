"""Plots of a comparison, live beside simulated, as PNG files."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no screen
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .compare import Comparison, Side  # noqa: E402

BIN_S = 1.0


def write_plots(c: Comparison, out_dir: Path) -> list[str]:
    names = []
    for name, draw in (("ttft_cdf.png", _ttft_cdf), ("tokens_per_s.png", _tokens_per_s),
                       ("queues.png", _queues)):
        fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
        draw(ax, c)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out_dir / name)
        plt.close(fig)
        names.append(name)
    return names


def _ttft_cdf(ax, c: Comparison) -> None:
    for label, side in (("live", c.live), ("sim", c.sim)):
        ttft = np.sort([o.ttft_client_s for o in side.outcomes if o.first_token_client_s is not None])
        ax.step(ttft, np.arange(1, len(ttft) + 1) / max(len(ttft), 1), where="post", label=label)
    ax.set(xlabel="time to first token (s)", ylabel="fraction of requests", title="TTFT CDF")


def _tokens_per_s(ax, c: Comparison) -> None:
    for label, side in (("live", c.live), ("sim", c.sim)):
        t, rate = _binned_rate(side)
        ax.plot(t, rate, label=label)
    ax.set(xlabel="time (s)", ylabel="tokens/s", title=f"tokens generated per second ({BIN_S:g} s bins)")


def _queues(ax, c: Comparison) -> None:
    for label, side, style in (("live", c.live, "-"), ("sim", c.sim, "--")):
        s = side.series
        ax.step(s.time_s, s.running, where="post", linestyle=style, label=f"running ({label})")
        ax.step(s.time_s, s.waiting, where="post", linestyle=style, label=f"waiting ({label})")
    ax.set(xlabel="time (s)", ylabel="requests", title="running and waiting")


def _binned_rate(side: Side) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(side.series.time_s)
    if len(t) == 0:
        return np.zeros(0), np.zeros(0)
    edges = np.arange(0.0, t.max() + BIN_S, BIN_S)
    counts, _ = np.histogram(t, bins=edges, weights=side.series.tokens)
    return edges[:-1], counts / BIN_S
