"""The answer of a non-streaming request: the stream collected into one JSON body."""
from __future__ import annotations

import asyncio
from typing import Callable

from starlette.responses import JSONResponse

from ..streams.events import Done, Token
from ..streams.stream import Reader
from .sse import wait_for_disconnect
from .validation import RequestError


class CollectedResponse:
    """A non-streaming answer. The stream is read as it comes (so it never holds
    the step loop back) while the client is watched for leaving, as a stream's is;
    then `answer(text, done)` is the body, or the error it raises."""

    def __init__(self, reader: Reader, answer: Callable[[str, Done], dict],
                 error_body: Callable[[RequestError], dict], headers: dict[str, str]):
        self.reader = reader
        self.answer = answer
        self.error_body = error_body
        self.headers = headers

    async def __call__(self, scope, receive, send) -> None:
        left = True
        try:
            collect = asyncio.ensure_future(self._collect())
            listener = asyncio.ensure_future(wait_for_disconnect(receive))
            try:
                await asyncio.wait((collect, listener), return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (collect, listener):
                    task.cancel()
                await asyncio.gather(collect, listener, return_exceptions=True)
            if collect.cancelled() or collect.exception() is not None:
                return
            left = False
            text, done = collect.result()
            try:
                response = JSONResponse(self.answer(text, done), headers=self.headers)
            except RequestError as exc:
                response = JSONResponse(self.error_body(exc), exc.kind.status,
                                        {**self.headers, **exc.headers})
            await response(scope, receive, send)
        finally:
            self.reader.detach(left=left)

    async def _collect(self) -> tuple[str, Done]:
        parts = []
        while True:
            event = await self.reader.next()
            self.reader.ack()
            if isinstance(event, Token):
                parts.append(event.text)
            elif isinstance(event, Done):
                parts.append(event.text)
                return "".join(parts), event
