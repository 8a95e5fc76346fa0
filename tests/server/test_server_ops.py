"""Operating the server: /health, /stats, /metrics, TCP_NODELAY on its sockets,
graceful shutdown in process and of `python -m live serve` on SIGTERM."""
import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from live_server import (PacedRunner, RawStream, ServerThread, running_server, serve_command,
                         stats, tiny_app, wait_for, wait_idle)

HISTOGRAMS = ["twinstep_time_to_first_token_seconds", "twinstep_inter_token_seconds",
              "twinstep_queue_time_seconds", "twinstep_e2e_request_seconds"]
GAUGES = ["twinstep_requests_running", "twinstep_requests_waiting", "twinstep_requests_paused",
          "twinstep_kv_cache_usage_ratio"]


def test_health_stats_and_metrics():
    app, engine = tiny_app()
    with running_server(app) as url:
        assert httpx.get(url + "/health").json() == {"status": "ok", "model": "tiny-llama"}
        httpx.post(url + "/v1/stream", json={"prompt": "measure me", "max_new_tokens": 5})
        after = wait_idle(url)
        for key in ("running", "waiting", "paused", "blocks_free", "blocks_reserved", "aborts",
                    "dropped_events", "tokens_after_leave", "streams_open", "queued_events"):
            assert key in after
        assert after["blocks_free"] == after["num_blocks"] == 128
        assert after["finished"] == {"length": 1}
        r = httpx.get(url + "/metrics")
        assert r.headers["content-type"].startswith("text/plain")
        text = r.text
        for name in HISTOGRAMS:
            assert f"# TYPE {name} histogram" in text
        for name in GAUGES:
            assert f"# TYPE {name} gauge" in text
        assert "twinstep_time_to_first_token_seconds_count 1.0" in text
        assert "twinstep_inter_token_seconds_count 4.0" in text
        assert 'twinstep_requests_finished_total{reason="length"} 1.0' in text
        assert "twinstep_wasted_tokens_total 0.0" in text
    assert engine.core.is_drained()


def test_two_apps_in_one_process_keep_their_own_metrics():
    (first, _), (second, _) = tiny_app(), tiny_app()
    with running_server(first) as a, running_server(second) as b:
        httpx.post(a + "/v1/stream", json={"prompt": "only here", "max_new_tokens": 2})
        wait_idle(a)
        assert "twinstep_e2e_request_seconds_count 1.0" in httpx.get(a + "/metrics").text
        assert "twinstep_e2e_request_seconds_count 0.0" in httpx.get(b + "/metrics").text


def test_stream_sockets_have_tcp_nodelay():
    app, _ = tiny_app(runner_wrapper=lambda r: PacedRunner(r, 0.01))
    with ServerThread(app) as running:
        client = RawStream(running.base_url, "/v1/stream", {"prompt": "x", "max_new_tokens": 50})
        client.read_events(2)
        connections = list(running.server.server_state.connections)
        assert connections
        for connection in connections:
            sock = connection.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        client.close()


def test_graceful_shutdown_ends_every_open_stream_with_a_last_event_and_a_whole_pool():
    app, engine = tiny_app(runner_wrapper=lambda r: PacedRunner(r, 0.01), num_blocks=512)
    long = {"max_tokens": 200}
    with ServerThread(app) as running:
        url = running.base_url
        ours = RawStream(url, "/v1/stream", {"prompt": "ours", "max_new_tokens": 200})
        chat = RawStream(url, "/v1/chat/completions",
                         {"messages": [{"role": "user", "content": "x"}], "stream": True, **long})
        message = RawStream(url, "/v1/messages",
                            {"messages": [{"role": "user", "content": "x"}], "stream": True, **long})
        whole = RawStream(url, "/v1/completions", {"prompt": "not streamed", **long})
        for client in (ours, chat, message):
            client.read_events(3)
        wait_for(lambda: stats(url)["running"] == 4, what="all four to run")
        running.stop()
    done = json.loads(ours.read_to_end()[-1].data)
    assert done["finish_reason"] == "cancelled" and done["usage"]["completion_tokens"] > 0
    events = chat.read_to_end()
    assert events[-1].data == "[DONE]"
    assert json.loads(events[-2].data)["error"]["code"] == "unavailable"
    events = message.read_to_end()
    assert events[-1].event == "error"
    assert json.loads(events[-1].data)["error"]["type"] == "overloaded_error"
    assert whole.read_head() == 503
    for client in (ours, chat, message, whole):
        client.close()
    assert engine.core.is_drained()
    summary = engine.core.snapshot()
    assert summary.blocks_reserved == summary.blocks_used == 0


def test_python_m_live_serve_stops_gracefully_on_sigterm(smollm2, tmp_path):
    """The command line on the embedded SmolLM2 (converted once by the fixture)."""
    steps = tmp_path / "steps.jsonl"
    with serve_command("--num-blocks", "64", "--max-batch", "4", "--policy", "pause",
                       "--step-log", str(steps)) as (process, url):
        client = RawStream(url, "/v1/stream", {"prompt": "Count to a thousand:",
                                               "max_new_tokens": 500, "ignore_eos": True})
        client.read_events(3)
        process.send_signal(signal.SIGTERM)
        done = json.loads(client.read_to_end()[-1].data)
        client.close()
        assert process.wait(60) == 0
    port = url.rsplit(":", 1)[1]
    output = process.stdout.read()
    assert done["finish_reason"] == "cancelled"
    assert f"on http://127.0.0.1:{port}" in output and '"policy": "pause"' in output
    assert "access: open: no client key, anyone who reaches the port may generate" in output
    records = [json.loads(line) for line in steps.read_text().splitlines()]
    assert records and all("duration_s" in r and "decode_batch" in r for r in records)


def test_python_m_live_serve_refuses_settings_that_make_no_sense():
    root = Path(__file__).resolve().parents[2]
    for args in (["--policy", "bogus"], ["--max-batch", "0"], ["--max-prefill-tokens", "0"]):
        result = subprocess.run([sys.executable, "-m", "live", "serve", *args], cwd=root,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("python -m live serve: ") and result.stderr.count("\n") == 1
