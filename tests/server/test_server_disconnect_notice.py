"""How a stream learns its client left (`--disconnect-notice`): a server that
listens notices at once, before another step runs; one that only writes notices
when the write of the next step's token finds the connection gone, and has made
that token for nobody. Either way the pool ends whole."""
import json
import time

import httpx
import pytest

from scheduler.settings import ServeSettings
from live_server import RawStream, held_app, running_server, stats, wait_for, wait_idle


def record(url: str, request_id: str) -> dict:
    lines = httpx.get(url + "/v1/requests").text.splitlines()
    return next(r for r in map(json.loads, lines) if r["id"] == request_id)


@pytest.mark.parametrize("leave", ["finish", "reset"])
@pytest.mark.parametrize("notice", ["listen", "write"])
def test_a_leave_is_noticed_by_listening_or_by_the_next_write(notice, leave):
    app, engine, runner = held_app(ServeSettings(disconnect_notice=notice))
    with running_server(app) as url:
        stream = RawStream(url, "/v1/stream", {"prompt": "leave early", "max_new_tokens": 50},
                           headers={"X-Request-Id": "gone"})
        assert stream.read_head() == 200
        stream.read_events(4)  # start and three tokens
        runner.hold_and_wait()
        made = runner.steps  # one token a step, the prefill's included
        # every token made is written before the client goes: no write is pending
        wait_for(lambda: stats(url)["queued_events"] == 0, what="the writes of the tokens made")
        getattr(stream, leave)()
        if notice == "listen":
            wait_for(lambda: stats(url)["readers"] == 0, what="the server to notice")
            runner.release()
        else:
            time.sleep(0.3)  # time enough to notice, for a server that listened
            assert stats(url)["readers"] == 1, "nothing was written, so nothing was noticed"
            runner.let(1)  # the held step's token for the stream: its write finds it gone
            wait_for(lambda: stats(url)["readers"] == 0, what="the failed write")
            runner.release()  # a step planned before the cancel came runs now
        end = wait_idle(url)
        gone = record(url, "gone")
        stream.close()
    assert gone["finish_reason"] == "cancelled"
    if notice == "listen":
        # the step under way at the close makes its token, for nobody; the next cancels
        assert gone["completion_tokens"] == made + 1
        assert gone["tokens_after_leave"] == 1
    else:
        # that token and, unless the failed write beat the next step's plan, one more,
        # held until the write had failed: the server counts only that one as made
        # after the leave
        assert made + 1 <= gone["completion_tokens"] <= made + 2
        assert gone["tokens_after_leave"] == gone["completion_tokens"] - (made + 1)
    assert end["tokens_after_leave"] == gone["tokens_after_leave"]
    assert end["blocks_reserved"] == 0 and engine.core.is_drained()
