"""The live server a calibration or a comparison drives: one the analysis starts
with `ServeSettings`, or one already running at a URL, maybe on another host behind
a gateway. Either way it is known by what it says over HTTP: `/v1/engine` for what
it runs, `/v1/steps` for its step records, `/v1/requests` for what its engine did
for each request."""
from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from live.client.launch import launched
from scheduler.flags import as_argv
from scheduler.settings import ServeSettings
from traces.names import named_keys, read_key_file

from .server_info import ServerInfo

CLOCK_PROBES = 5


@dataclass(frozen=True)
class Access:
    """The keys the analysis uses on a server with keys: the admin key for its
    records, each key name's secret for the requests of a trace that name one, and
    the first client key for those that name none (the calibration's)."""

    admin_key: str | None = None
    keys: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, api_key: tuple[str, ...] = (), api_keys_file: str | None = None,
           admin_key: str | None = None) -> Access:
        """From the settings that give a server its keys, read as the server reads them."""
        entries = list(api_key) + (read_key_file(api_keys_file) if api_keys_file else [])
        return cls(admin_key, named_keys(entries))

    def replay_options(self) -> dict:
        """The load generator's options that send these keys."""
        return {"keys": self.keys, "api_key": next(iter(self.keys.values()), None),
                "admin_key": self.admin_key}


class LiveTarget:
    def __init__(self, url: str, access: Access = Access(), timeout_s: float = 60.0):
        self.url = url.rstrip("/")
        self.access = access
        admin = {"Authorization": f"Bearer {access.admin_key}"} if access.admin_key else None
        # trust_env off, as in the load generator: no proxy from the environment
        # between the analysis and the server it measures
        self._http = httpx.Client(base_url=self.url, timeout=timeout_s, trust_env=False,
                                  headers=admin)
        self.info, self.clock_offset_s = self._probe()

    def describe(self) -> ServerInfo:
        response = self._http.get("/v1/engine")
        response.raise_for_status()
        return ServerInfo.from_json(response.json())

    def last_step(self) -> int:
        """The newest step the server has recorded: a replay's steps come after it."""
        return self.describe().steps["last"]

    def last_request(self) -> int:
        """The number of the request the server finished last."""
        return self.describe().requests["last"]

    def steps_after(self, step: int) -> list[dict]:
        """The records of the steps after `step` up to the newest one now (not those
        other clients make while they are read), with `start_unix` moved onto this
        host's clock."""
        return self._records("/v1/steps", "step", step, self.last_step(), ("start_unix",))

    def requests_after(self, n: int) -> list[dict]:
        """The records of the requests that finished after the `n`th, up to the
        newest now, with their times moved onto this host's clock."""
        return self._records("/v1/requests", "n", n, self.last_request(),
                             ("arrival_unix", "admitted_unix", "first_token_unix", "finish_unix",
                              "left_unix"))

    def _records(self, path: str, key: str, after: int, last: int, times: tuple[str, ...]) -> list[dict]:
        records: list[dict] = []
        while after < last:
            response = self._http.get(path, params={"after": after})
            if response.status_code == 410:
                raise RuntimeError(
                    f"the server at {self.url} no longer keeps the records of this run "
                    f"({response.json()['error']['message']}); start it with a larger ring")
            response.raise_for_status()
            page = [r for r in map(json.loads, response.text.splitlines()) if r[key] <= last]
            for record in page:
                for name in times:
                    if record[name] is not None:
                        record[name] -= self.clock_offset_s
            records += page
            if not page:
                break
            after = page[-1][key]
        return records

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> LiveTarget:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _probe(self) -> tuple[ServerInfo, float]:
        """The server's description, and how far its clock is ahead of this host's:
        from the quickest of a few round trips, taking its `time_unix` as read
        halfway through. An offset within that half round trip is no offset (the
        clocks of one host, or of hosts kept in step)."""
        best = None
        for _ in range(CLOCK_PROBES):
            sent = time.time()
            info = self.describe()
            received = time.time()
            if best is None or received - sent < best[0]:
                best = (received - sent, info, info.time_unix - (sent + received) / 2)
        round_trip, info, offset = best
        return info, offset if abs(offset) > round_trip / 2 else 0.0


@contextlib.contextmanager
def live_target(server: ServeSettings | str, log_path: Path,
                access: Access = Access()) -> Iterator[LiveTarget]:
    """`server` is the settings to start one with (its output goes to `log_path`,
    its keys are those the settings give), or the URL of one already running, which
    is left running and reached with `access`."""
    with contextlib.ExitStack() as stack:
        if isinstance(server, str):
            url = server
        else:
            url = stack.enter_context(launched(as_argv(server), log=log_path)).url
            access = Access.of(server.api_key, server.api_keys_file, server.admin_key)
        yield stack.enter_context(LiveTarget(url, access))
