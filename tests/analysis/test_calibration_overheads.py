"""The overheads a calibration reads from the clients' records beside the server's:
the step loop's wake-up only from requests that found the engine idle, so that a
host too slow for the workload's spacing does not take a wait behind earlier
requests' steps for the wake."""
from types import SimpleNamespace

from analysis.calibrate import overheads

START = 1_000.0


def solo(i: int, sent_s: float, taken_s: float, admitted_s: float):
    """The client's outcome and the server's record of a request sent alone."""
    outcome = SimpleNamespace(id=f"solo-{i}", arrival_s=sent_s, first_token_client_s=None)
    record = {"arrival_unix": START + taken_s, "admitted_unix": START + admitted_s,
              "first_token_unix": None}
    return outcome, record


def measured(requests, steps):
    result = SimpleNamespace(started_unix=START, outcomes=[o for o, _ in requests])
    return overheads([result], {o.id: r for o, r in requests}, steps)


def test_the_wake_is_read_from_requests_that_found_the_engine_idle():
    # the first three arrive while a 3 s step runs and wait for it; the rest wake it
    busy = [{"start_unix": START + 9.0, "duration_s": 3.0}]
    requests = [solo(0, 10.0, 10.001, 12.0), solo(1, 10.5, 10.501, 12.0),
                solo(2, 11.0, 11.001, 12.0), solo(3, 20.0, 20.001, 20.0014),
                solo(4, 30.0, 30.001, 30.0016), solo(5, 40.0, 40.001, 40.0012)]
    got = measured(requests, busy)
    assert abs(got["wake_s"] - 0.0004) < 1e-9
    # HTTP and tokenizing are the front's, busy engine or not: every solo request
    assert abs(got["request_s"] - 0.001) < 1e-9
    # the same requests, as if the step log had none in flight: the waits are taken in
    assert measured(requests, [])["wake_s"] > 0.49


def test_no_wake_when_every_solo_request_found_the_engine_busy():
    busy = [{"start_unix": START, "duration_s": 100.0}]
    got = measured([solo(0, 10.0, 10.001, 100.0), solo(1, 20.0, 20.001, 100.0)], busy)
    assert "wake_s" not in got and "request_s" in got
