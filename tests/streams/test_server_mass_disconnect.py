"""Hundreds of clients leaving at once, while tokens are flowing to all of them:
each departure must reach the engine. (A wait for a stream's next event that
swallowed the cancel of a departing client once left streams generating for
nobody, and their writers stuck, under exactly this load.)"""
import asyncio
import json
import socket
import struct

from scheduler.settings import ServeSettings
from live_server import PacedRunner, running_server, stats, tiny_app, wait_for

STREAMS = 800
BLOCK_SIZE = 16
MAX_NEW = 250
STEP_S = 0.05
"""Every stream would need 12.5 s to run to its end: far longer than opening them all."""


async def _open_stream(port: int) -> asyncio.StreamWriter:
    """A stream of the project's own format, read until its first token event."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"prompt": "abcd", "max_new_tokens": MAX_NEW, "ignore_eos": True}).encode()
    writer.write(b"POST /v1/stream HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await reader.readuntil(b"event: token")
    return writer


async def _open_all_then_reset(port: int) -> None:
    opening = asyncio.Semaphore(64)

    async def one():
        async with opening:
            return await _open_stream(port)

    writers = await asyncio.gather(*(one() for _ in range(STREAMS)))
    for writer in writers:  # all at once, abortively: RST with SO_LINGER 0
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                   struct.pack("ii", 1, 0))
        writer.transport.abort()


def test_every_departure_reaches_the_engine_when_hundreds_leave_at_once():
    blocks = STREAMS * -(-(4 + MAX_NEW) // BLOCK_SIZE)
    app, engine = tiny_app(ServeSettings(), num_blocks=blocks, block_size=BLOCK_SIZE,
                           max_batch=STREAMS, max_waiting=STREAMS,
                           runner_wrapper=lambda r: PacedRunner(r, STEP_S))
    with running_server(app) as url:
        asyncio.run(_open_all_then_reset(int(url.rsplit(":", 1)[1])))

        def idle():
            s = stats(url)
            return None if (s["running"] or s["waiting"] or s["streams_open"] or s["readers"]) else s
        after = wait_for(idle, timeout=60.0, what="every stream whose client left to end")
    assert after["finished"] == {"cancelled": STREAMS}
    assert after["admissions"] == after["releases"] == STREAMS
    assert after["blocks_free"] == blocks and after["blocks_reserved"] == 0
    assert engine.core.is_drained() and engine.core.pool.is_whole()
