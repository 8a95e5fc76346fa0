"""The pure scheduler core: requests, the block pool, admission by reservation
(whole, or optimistic with preemption), step plans, the thread-safe inbox, backlog
policies and events. Standard library only: the live engine and the simulator both
drive it."""
from .admission import ADMISSION_POLICIES, AdmissionPolicy, Optimistic, ReserveWhole
from .backlog import (BACKLOG_POLICIES, Backlog, BacklogPolicy, Decision, Drop, Naive,
                      Pause, PauseThenDrop, Unbounded, make_policy)
from .block_pool import BlockPool, blocks_for
from .config import SchedulerConfig
from .core import Scheduler
from .errors import (DoubleRelease, InvalidRequest, InvariantBroken, KeyLimitReached,
                     QueueFull, RequestTooLarge, SubmitRefused)
from .events import Event, FinishEvent, TokenEvent
from .key_quota import KeyHolding, KeyQuota
from .request import FinishReason, Request, Sequence, SeqState
from .snapshot import CoreSnapshot
from .step.passes import prefill_passes
from .step.plan import PlanFeatures, StepPlan

__all__ = [
    "ADMISSION_POLICIES", "AdmissionPolicy", "Optimistic", "ReserveWhole",
    "BACKLOG_POLICIES", "Backlog", "BacklogPolicy", "Decision", "Drop", "Naive", "Pause",
    "PauseThenDrop", "Unbounded", "make_policy",
    "BlockPool", "blocks_for", "Scheduler", "SchedulerConfig",
    "DoubleRelease", "InvalidRequest", "InvariantBroken", "KeyLimitReached", "QueueFull",
    "RequestTooLarge", "KeyHolding", "KeyQuota",
    "SubmitRefused", "Event", "FinishEvent", "TokenEvent", "PlanFeatures", "StepPlan",
    "prefill_passes",
    "FinishReason", "Request", "Sequence", "SeqState", "CoreSnapshot",
]
