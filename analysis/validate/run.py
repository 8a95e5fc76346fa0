"""Running the matrix: one server for each setting (or the one at `--url`), each
trace of the setting replayed live `runs` times against it and once on the
virtual clock with the one profile, every cell judged as it ends. A matrix run
once can judge another profile later (`rejudge`): the live runs are the costly
part, and the simulated side is computed again in seconds."""
from __future__ import annotations

import json
from dataclasses import replace
from itertools import groupby
from pathlib import Path

from scheduler.settings import ServeSettings
from sim import Profile, replay as sim_replay

from ..compare import compare, simulated_server
from ..live_target import Access, live_target
from .matrix import SETTINGS, TRACES, Cell
from .verdict import CellVerdict, cell_verdict, recorded_runs


def validate(base: ServeSettings | str, profile: Profile, matrix: list[Cell], runs: int,
             out_dir: Path, log=print, access: Access = Access()) -> list[CellVerdict]:
    """`base`: the settings each cell's server starts from, or the URL of a server
    running, which can only be judged at its own settings (other cells are skipped,
    and said so)."""
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}")
    out_dir.mkdir(parents=True, exist_ok=True)
    verdicts = []
    for settings, group in groupby(matrix, key=lambda cell: cell.settings):
        if isinstance(base, str) and SETTINGS[settings]:
            log(f"skipped: {settings} (the server at {base} runs its own settings)")
            continue
        server = base if isinstance(base, str) else replace(base, **SETTINGS[settings])
        with live_target(server, out_dir / f"server-{settings}.log", access) as target:
            max_model_len = target.info.scheduler["max_model_len"]
            for cell in group:
                try:
                    trace = TRACES[cell.trace](max_model_len)
                except FileNotFoundError as exc:
                    log(f"skipped: {cell.name}: no trace: {exc}")
                    continue
                verdicts.append(_cell(cell, trace, profile, target, runs, out_dir, log))
    return verdicts


def _cell(cell: Cell, trace, profile: Profile, target, runs: int, out_dir: Path,
          log) -> CellVerdict:
    folder = out_dir / f"{cell.trace}--{cell.settings}"
    comparisons = []
    for i in range(runs):
        log(f"{cell.name}: live run {i + 1} of {runs} ({len(trace)} requests)")
        comparisons.append(compare(trace, profile, target.url, folder / f"run-{i + 1}",
                                   log=lambda *_: None, access=target.access))
    # the simulator is deterministic: every run's simulated side is the same
    first = comparisons[0]
    verdict = cell_verdict(cell.trace, cell.settings, [c.live.summary.as_dict() for c in comparisons],
                           first.sim.summary.as_dict(), first.leavers,
                           [b.describe() for b in first.beyond_fit], first.server.sim_settings())
    log(f"{cell.name}: {'within bounds' if verdict.ok else 'OVER a bound'}")
    return verdict


def rejudge(recorded: Path, profile: Profile) -> list[CellVerdict]:
    """The cells of a `validate.json` judged again with `profile`: the same live
    runs, each trace simulated anew at the settings its live server ran."""
    verdicts = []
    for cell in json.loads(Path(recorded).read_text())["cells"]:
        settings = cell.get("sim_settings")
        if not settings:
            raise ValueError(f"{recorded}: cell {cell['trace']} × {cell['settings']} does not "
                             f"keep the settings it ran (written by an older validate)")
        trace = TRACES[cell["trace"]](settings["max_model_len"])
        simulated = sim_replay(trace, simulated_server(profile, settings))
        verdicts.append(cell_verdict(cell["trace"], cell["settings"], recorded_runs(cell),
                                     simulated.summary.as_dict(),
                                     sum(r.client.leaves for r in trace),
                                     [b.describe() for b in simulated.beyond_fitted], settings))
    return verdicts
