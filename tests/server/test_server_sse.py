"""The bytes of one server-sent event or comment, read back by a standard parser."""
import pytest

from live.server.sse import comment_bytes, event_bytes
from live.client.sse_parser import Comment, SSEParser


def test_an_event_with_id_name_and_data():
    assert event_bytes('{"a":1}', "token", "r1:3") == b'id: r1:3\nevent: token\ndata: {"a":1}\n\n'
    assert event_bytes("[DONE]") == b"data: [DONE]\n\n"


def test_multi_line_data_round_trips_whatever_the_line_ends():
    data = "one\ntwo\r\nthree\rfour\n"
    raw = event_bytes(data, "text")
    assert raw == b"event: text\ndata: one\ndata: two\ndata: three\ndata: four\ndata: \n\n"
    [event] = SSEParser().feed(raw)
    assert event.data == "one\ntwo\nthree\nfour\n" and event.event == "text"


def test_comments_are_skipped_by_parsers_but_seen():
    raw = comment_bytes("keep-alive") + comment_bytes("two\nlines") + event_bytes("x")
    assert raw.startswith(b": keep-alive\n\n: two\n: lines\n\n")
    items = SSEParser().feed(raw)
    assert items[:3] == [Comment("keep-alive"), Comment("two"), Comment("lines")]
    assert items[3].data == "x"


@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\0b"])
def test_ids_and_names_that_would_break_the_framing_are_refused(bad):
    with pytest.raises(ValueError):
        event_bytes("x", id=bad)
    if "\0" not in bad:
        with pytest.raises(ValueError):
            event_bytes("x", event=bad)
