"""The step log is for calibration: a file that cannot be written (a full disk)
costs its records in the file, never a step."""
import os

import pytest

from live.engine.step_log import StepLog
from scheduler import PlanFeatures


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_is_counted_and_the_records_stay_in_the_ring():
    log = StepLog("/dev/full")
    features = PlanFeatures(1, 64, 64 * 64, 8, 512)
    for step in range(1, 1001):  # well past the file's buffer
        log.record(step, step * 0.01, 0.01, features, tokens=9, admitted=9, waiting=0, paused=0,
                   blocks_reserved=20)
    log.flush()
    log.close()
    assert log.write_errors >= 1
    assert [r["step"] for r in log.after(0)] == list(range(1, 1001))
