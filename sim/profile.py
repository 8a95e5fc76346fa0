"""Cost profiles: a fitted `LinearCost` with the machine, model and engine settings
it was measured on, as a small JSON file. Shipped profiles live in
`sim/profiles/`, named after their host (`cpu-…`: a 2-core AMD EPYC, the default;
`xeon-x2-…`: a 2-core Intel Xeon). The `cpu-…` ones are the `profile.json` of
`python -m analysis calibrate`, steps and the overheads beside them measured together;
the Xeon's were fitted from step logs alone."""
from __future__ import annotations

import datetime
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .cost_model import FEATURES, LinearCost
from .fit import fit, load_step_log
from .fitted_ranges import FittedRanges
from .overheads import Overheads
from .scatter import measured_scatter

SHIPPED_DIR = Path(__file__).parent / "profiles"
CPU_SMOLLM2 = "cpu-smollm2-135m-fp32"
"""The default profile: the embedded model on the CPU, in the default dtype."""


@dataclass(frozen=True)
class Profile:
    hardware: str
    model: str
    dtype: str
    coefficients: dict[str, float]
    fit: dict
    """The `FitReport` of the coefficients: errors on held-out steps."""
    steps: int
    date: str
    device: str | None = None
    block_size: int | None = None
    max_batch: int | None = None
    num_blocks: int | None = None
    features: list[str] = field(default_factory=lambda: list(FEATURES))
    batch_excess: list[float] = field(default_factory=list)
    """`LinearCost.batch_excess`: seconds above the linear terms by decode batch."""
    overheads: dict[str, float] = field(default_factory=dict)
    """`Overheads` fields a calibration measured outside the engine's steps."""
    fitted_ranges: dict[str, int] = field(default_factory=dict)
    """`FittedRanges`: each watched feature's largest value among the steps of the
    fit; a profile saved before these were kept has none."""
    step_scatter: list[float] = field(default_factory=list)
    """`measured_scatter`: how the calibration's steps scattered about their price;
    none (every step at its price) in a profile fitted without the clock."""

    def cost_model(self) -> LinearCost:
        return LinearCost(**self.coefficients, batch_excess=tuple(self.batch_excess))

    def overheads_model(self) -> Overheads:
        return Overheads(**self.overheads)

    def ranges(self) -> FittedRanges | None:
        return FittedRanges(**self.fitted_ranges) if self.fitted_ranges else None


def build_profile(step_log: str | Path, hardware: str, model: str, dtype: str, *,
                  device: str | None = None, block_size: int | None = None,
                  max_batch: int | None = None, num_blocks: int | None = None,
                  holdout_fraction: float = 0.2, seed: int = 0) -> Profile:
    """Fit a step log. The device and engine settings default to those the log's
    lines carry, if they carry them."""
    steps = load_step_log(step_log)
    cost, report = fit(steps, holdout_fraction, seed)
    logged = lambda key: next((s[key] for s in steps if s.get(key) is not None), None)  # noqa: E731
    return Profile(
        hardware=hardware, model=model, dtype=dtype, coefficients=cost.coefficients(),
        batch_excess=list(cost.batch_excess),
        fit=report.as_dict(), steps=len(steps),
        fitted_ranges=FittedRanges.of(steps).as_dict(),
        step_scatter=measured_scatter(steps, cost),
        date=datetime.date.today().isoformat(),
        device=device or logged("device"),
        block_size=block_size or logged("block_size"),
        max_batch=max_batch or logged("max_batch"),
        num_blocks=num_blocks or logged("num_blocks"))


def save_profile(profile: Profile, path: str | Path) -> None:
    Path(path).write_text(json.dumps(asdict(profile), indent=2) + "\n")


def load_profile(path_or_name: str | Path) -> Profile:
    """A profile from a path, or by name from the shipped ones."""
    path = Path(path_or_name)
    if not path.exists():
        path = SHIPPED_DIR / f"{path_or_name}.json"
        if not path.exists():
            shipped = sorted(p.stem for p in SHIPPED_DIR.glob("*.json"))
            raise FileNotFoundError(
                f"no profile {str(path_or_name)!r}; shipped: {', '.join(shipped) or 'none'} "
                "(fit one from a live step log with `python -m sim fit`, or use a constant cost)")
    data = json.loads(path.read_text())
    unknown = set(data["features"]) - set(FEATURES)
    if unknown or set(data["coefficients"]) != set(data["features"]):
        raise ValueError(f"profile {path}: features {data['features']} do not match {list(FEATURES)}")
    return Profile(**data)
