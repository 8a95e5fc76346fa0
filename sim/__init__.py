"""The simulator: the scheduler core driven on a SimPy virtual clock, with step
costs from a fitted profile, simulated clients (readers, leavers, transport
buffers) and per-request outcomes in the schema the live client writes."""
from .cost_model import FEATURES, ConstantCost, CostModel, LinearCost, ScaledCost
from .fit import FitReport, fit, load_step_log, pace, write_step_log
from .overheads import Overheads
from .profile import Profile, build_profile, load_profile, save_profile
from .replay import Replay, ReplayNotDrained, replay
from .settings import ReplaySetup, build_setup
from .summary import summarize_replay
from .sweep import sweep
from .timeseries import TimeSeries
from .wire import WIRE_FORMATS, WireFormat

__all__ = [
    "FEATURES", "ConstantCost", "CostModel", "LinearCost", "ScaledCost", "FitReport", "fit",
    "load_step_log", "pace", "write_step_log",
    "summarize_replay", "Overheads", "Profile", "build_profile",
    "load_profile", "save_profile", "Replay",
    "ReplayNotDrained", "replay", "ReplaySetup", "build_setup", "sweep", "TimeSeries",
    "WIRE_FORMATS", "WireFormat",
]
