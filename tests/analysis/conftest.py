"""A profile a test calibrates is cached in a folder of the test's own (unless the
test names a cache with TWINSTEP_CACHE): in the user's cache `make run` and
`validate` would find it beside the profiles they measured."""
import os

import pytest

import analysis.calibrate


@pytest.fixture(autouse=True)
def profiles_of_the_test(tmp_path, monkeypatch):
    user = analysis.calibrate.cache_root
    monkeypatch.setattr(analysis.calibrate, "cache_root",
                        lambda: user() if "TWINSTEP_CACHE" in os.environ else tmp_path / "twinstep")
