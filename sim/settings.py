"""What a replay varies besides the trace, and how to build it from flat named
settings (the command line's options and a sweep's parameters): the server's
settings it shares (`ServeSettings`) and the simulator's own (`SimSettings`)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from scheduler import BACKLOG_POLICIES, BacklogPolicy, SchedulerConfig, Unbounded, make_policy
from scheduler.settings import SHARED, ServeSettings, check_disconnect_notice, scoped

from traces.slo import Slo

from .cost_model import CostModel
from .fitted_ranges import FittedRanges
from .overheads import Overheads
from .wire import WIRE_FORMATS, WireFormat, wire_format


@dataclass(frozen=True)
class ReplaySetup:
    config: SchedulerConfig
    cost: CostModel
    policy: BacklogPolicy = field(default_factory=Unbounded)
    overheads: Overheads = field(default_factory=Overheads)
    wire: WireFormat = WIRE_FORMATS["twinstep"]
    resume_grace_s: float = 0.0
    """The server's resume grace: a stream whose client left stays paused this long
    (its slot and blocks held) before it is cancelled. No client of a trace comes
    back, so the grace only ever runs out."""
    max_tokens_factor: float = 1.0
    """Clients ask for this many times the tokens a request of the trace makes
    (rounded up, within the model's context), as they set max_tokens far above what
    a model generates before its EOS: reservation holds what they ask, the model
    stops (eos) where the trace's output ends. 1: they ask for exactly that."""
    disconnect_notice: str = "listen"
    """How the server learns that a client left: `listen`, the overheads'
    `disconnect_detect_s` after it; `write`, when the next event for the stream is
    written (and nothing written, nothing learnt)."""
    slo: Slo | None = None
    """What the summary judges each request by (attainment and goodput)."""
    fitted: FittedRanges | None = None
    """The ranges `cost` was fitted on: the replay says which features it took
    past them (`Replay.beyond_fitted`)."""
    step_scatter: tuple[float, ...] = ()
    """How the host's step times scatter about `cost`'s price (a profile's
    `step_scatter`): each step takes its price times a factor drawn from them.
    Empty: every step takes its price."""
    scatter_seed: int = 0
    """The seed of those draws: a replay gives the same figures every time."""

    def __post_init__(self):
        if self.resume_grace_s < 0:
            raise ValueError("resume_grace_s must be >= 0")
        if self.max_tokens_factor < 1:
            raise ValueError("max_tokens_factor must be >= 1")
        check_disconnect_notice(self.disconnect_notice)


CONFIG_SETTINGS = tuple(f.name for f in fields(SchedulerConfig))
OVERHEAD_SETTINGS = tuple(f.name for f in fields(Overheads))
POLICY_SETTINGS = tuple(sorted({f for cls in BACKLOG_POLICIES.values()
                                for f in getattr(cls, "__dataclass_fields__", {})}))
SETTINGS = ("policy", "wire", "event_padding", "resume_grace_s", "max_tokens_factor",
            "disconnect_notice", "slo_ttft_s", "slo_tpot_s", "steady_steps", "scatter_seed"
            ) + CONFIG_SETTINGS + OVERHEAD_SETTINGS + POLICY_SETTINGS


def build_setup(cost: CostModel, *, policy: str = "unbounded", wire: str = "twinstep",
                event_padding: int = 0, resume_grace_s: float = 0.0,
                max_tokens_factor: float = 1.0, disconnect_notice: str = "listen",
                slo_ttft_s: float | None = None,
                slo_tpot_s: float | None = None, fitted: FittedRanges | None = None,
                step_scatter: tuple[float, ...] | list[float] = (), scatter_seed: int = 0,
                steady_steps: bool = False, **settings) -> ReplaySetup:
    """`settings` are SchedulerConfig fields, Overheads fields and backlog policy
    parameters, by name; a parameter the chosen policy does not take is ignored, so
    one set of settings serves a sweep over policies. `event_padding`,
    `resume_grace_s`, `max_tokens_factor` and `disconnect_notice`: see
    `WireFormat.padded` and `ReplaySetup`; `slo_ttft_s` and `slo_tpot_s`: its `Slo`; `fitted`: the ranges
    the cost model was fitted on; `step_scatter` and `scatter_seed`: see `ReplaySetup`,
    `steady_steps` leaves the scatter out."""
    unknown = set(settings) - set(SETTINGS)
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}; known: {', '.join(SETTINGS)}")
    pick = lambda names: {k: v for k, v in settings.items() if k in names and v is not None}  # noqa: E731
    return ReplaySetup(
        config=SchedulerConfig(**pick(CONFIG_SETTINGS)),
        cost=cost,
        policy=make_policy(policy, **pick(POLICY_SETTINGS)),
        overheads=Overheads(**pick(OVERHEAD_SETTINGS)),
        wire=wire_format(wire).padded(event_padding),
        resume_grace_s=resume_grace_s,
        max_tokens_factor=max_tokens_factor,
        disconnect_notice=disconnect_notice,
        slo=Slo.given(slo_ttft_s, slo_tpot_s),
        fitted=fitted,
        step_scatter=() if steady_steps else tuple(step_scatter),
        scatter_seed=scatter_seed,
    )


DEFAULT_POOL = 4096
"""KV blocks of a replay whose pool neither the settings nor a profile give."""

_OVERHEAD_DEFAULTS = {f.name: f.default for f in fields(Overheads)}


def _own(default, help: str, choices: list[str] | None = None):
    metadata = {"help": help} if choices is None else {"help": help, "choices": choices}
    return field(default=default, metadata=metadata)


def _overhead(name: str, help: str):
    """An `Overheads` field: unless given, what the profile's calibration measured."""
    return _own(None, f"{help}; none: the profile's, else {_OVERHEAD_DEFAULTS[name]}")


@dataclass(frozen=True)
class SimSettings:
    """What only the simulator is told: what a server knows by itself (its model's
    context), a policy parameter a server does not take, the clients' wire format
    and what the live path adds outside the engine's steps (`Overheads`)."""

    max_model_len: int | None = _own(None, "the model's context: a longer request is "
                                           "refused; none: no limit")
    resume_at: int | None = _own(None, "pause: put a paused stream back once its reader is "
                                       "down to this many events; none: half --max-queued")
    wire: str = _own("twinstep", "the streaming format, for the bytes an event takes",
                     sorted(WIRE_FORMATS))
    max_tokens_factor: float = _own(1.0, "clients ask for this many times the tokens they "
                                         "get, which whole-length reservation holds")
    steady_steps: bool = _own(False, "every step takes the profile's price, without the "
                                     "scatter about it its calibration measured")
    scatter_seed: int = _own(0, "the seed of each step's draw from that scatter")
    request_s: float | None = _overhead("request_s", "from arrival to the core's inbox while "
                                                     "the server's front is free: HTTP, "
                                                     "validation, tokenization")
    front_s: float | None = _overhead("front_s", "how far apart requests that arrive together "
                                                 "reach the core's inbox")
    wake_s: float | None = _overhead("wake_s", "from a wish reaching an idle engine to its "
                                               "step starting")
    delivery_s: float | None = _overhead("delivery_s", "from the end of a step to its events "
                                                       "in the streams' queues")
    disconnect_detect_s: float | None = _overhead("disconnect_detect_s", "from a client "
                                                  "leaving to the cancel in the core's inbox")
    transport_bytes: int | None = _overhead("transport_bytes", "bytes a stream's connection "
                                            "holds between the server's queue and the reader")


def replay_settings(serve: ServeSettings, own: SimSettings, pool: int,
                    measured: dict[str, float]) -> dict:
    """The flat settings (`build_setup`'s names) of a replay of a server run with
    `serve`: its pool `pool` unless `serve` gives one, and the overheads not given
    those `measured` (a profile's calibration), else `Overheads`' defaults."""
    flat = {name: getattr(serve, name) for name in scoped(SHARED)}
    flat["num_blocks"] = serve.num_blocks or pool
    for name, value in asdict(own).items():
        flat[name] = measured.get(name) if value is None else value
    return {name: value for name, value in flat.items() if value is not None}
