"""A calibration that starts its own server for the default workload measures
decode batches up to twice the server's limit, so that a what-if at a larger batch
is priced from measured steps; a workload given, or a server already running, is
calibrated at the batch it has."""
import contextlib
from types import SimpleNamespace

import pytest

from analysis import calibrate as calibration
from analysis.workloads import batch_ladder
from scheduler.settings import ServeSettings
from traces import TraceRequest


class Driven(Exception):
    """Raised where the calibration would first drive its server."""


@pytest.fixture
def driven(monkeypatch):
    """The settings each calibration started its server with (a URL where it started
    none) and the ladder sizes of the workload it then drove."""
    seen = []

    @contextlib.contextmanager
    def live_target(server, log_path, access):
        max_batch = 8 if isinstance(server, str) else server.max_batch
        seen.append({"server": server})
        yield SimpleNamespace(url="http://127.0.0.1:9", info=SimpleNamespace(
            model="m", hardware="h", device="cpu", dtype="float32",
            scheduler={"max_batch": max_batch, "max_model_len": 2048, "chunked_prefill": False}))

    def drive(target, phases, progress):
        seen[-1]["rungs"] = [len(phase) for phase in phases if phase[0].id.startswith("ladder-0-")]
        seen[-1]["long"] = sum(r.id.startswith("long-") for phase in phases for r in phase)
        raise Driven

    monkeypatch.setattr(calibration, "live_target", live_target)
    monkeypatch.setattr(calibration, "_drive", drive)
    return seen


def test_a_started_server_batches_twice_its_limit_for_the_default_workload(driven, tmp_path):
    with pytest.raises(Driven):
        calibration.calibrate(ServeSettings(max_batch=16), tmp_path, log=lambda *a: None)
    [run] = driven
    assert run["server"].max_batch == 16 * calibration.BATCH_REACH == 32
    assert run["rungs"] == batch_ladder(32) and run["rungs"][-1] == 32
    assert run["long"] == 16  # the long contexts at the server's own batch


def test_a_given_workload_or_a_running_server_keeps_its_batch(driven, tmp_path):
    workload = [[TraceRequest("ladder-0-1-0", 0.0, 24, 4)]]
    with pytest.raises(Driven):
        calibration.calibrate(ServeSettings(max_batch=16), tmp_path, workload=workload,
                              log=lambda *a: None)
    with pytest.raises(Driven):
        calibration.calibrate("http://127.0.0.1:9", tmp_path, log=lambda *a: None)
    given, running = driven
    assert given["server"].max_batch == 16 and given["rungs"] == [1]
    assert running["server"] == "http://127.0.0.1:9"
    assert running["rungs"] == batch_ladder(8) and running["long"] == 8
