"""A token's event from its format's template is, byte for byte, the event the
format renders whole, whatever the text: quotes, backslashes, line ends,
control characters, non-ASCII, the marker itself. (A token's text is decoded
UTF-8: it never holds a lone surrogate.)"""
import json

import pytest
from hypothesis import given, settings, strategies as st

from live.runner.params import SamplingParams
from live.server import wire_anthropic, wire_openai, wire_stream
from live.server.sse import TokenTemplate, event_bytes
from live.server.validation import GenerationRequest
from live.streams.events import Token

TEXTS = st.one_of(st.text(st.characters(exclude_categories=("Cs",))),
                  st.sampled_from(['"', "\\", "\n", "\r\n", "\x00", "\u2028",
                                   TokenTemplate.MARK, "data: x\n\nid: y", "é漢😀"]))


def request(**usage) -> GenerationRequest:
    return GenerationRequest([1, 2], 8, SamplingParams(), **usage)


def own_whole(stream_id: str, token: Token) -> bytes:
    data = json.dumps({"index": token.index, "token_id": token.token_id, "text": token.text},
                      ensure_ascii=False, separators=(",", ":"))
    return event_bytes(data, "token", f"{stream_id}:{token.seq}")


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, seq=st.integers(0, 10**6), token_id=st.integers(0, 200_000))
def test_every_format_renders_a_token_as_it_renders_it_whole(text, seq, token_id):
    token = Token(seq, seq - 1, token_id, text)
    assert wire_stream.StreamRenderer("req-1").render(token) == own_whole("req-1", token)
    for chat in (True, False):
        for usage in ({}, {"include_usage": True}):
            # one renderer for both: two would each stamp `created`, a second apart at times
            renderer = wire_openai.ChunkRenderer(chat, "chatcmpl-1", "m", request(**usage))
            assert renderer.render(token) == renderer._chunk(text)
    messages = wire_anthropic.MessageRenderer("msg_1", "m", ())
    assert messages.render(token) == messages._delta(text)


def test_continuous_usage_counts_each_token_and_takes_no_template():
    renderer = wire_openai.ChunkRenderer(True, "chatcmpl-1", "m",
                                         request(include_usage=True, continuous_usage=True))
    chunks = [json.loads(renderer.render(Token(i + 1, i, 7, "a"))[6:]) for i in range(3)]
    assert [c["usage"]["completion_tokens"] for c in chunks] == [1, 2, 3]


def test_a_template_needs_its_marker_once():
    with pytest.raises(ValueError):
        TokenTemplate(b"data: {}\n\n")
