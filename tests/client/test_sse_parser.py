"""The SSE parser against the WHATWG rules, on a stream that exercises each of
them, fed whole, split in two at every byte, and byte by byte."""
from live.client.sse_parser import Comment, SSEEvent, SSEParser

TRICKY = (
    b"\xef\xbb\xbf"                        # a BOM, ignored at the start of the stream
    b": keep-alive\r\n"
    b"event: start\r\n"
    b"id: r1:0\r\n"
    b'data: {"a": 1}\r\n'
    b"\r\n"
    b"data:  two spaces\r"                 # CR line ends; only one space is dropped
    b"data\r"                              # a field without a colon: empty value
    b"data:line3\r"
    b"\r"
    b"id: r1:1\n"
    b"retry: 1500\n"
    b"retry: 15x\n"                        # not all digits: ignored
    b"unknown: field\n"
    b"event: token\n"
    b"data: caf\xc3\xa9 \xe2\x82\xac\n"    # multi-byte UTF-8, split inside a character below
    b"\n"
    b"event: nodata\n"                     # no data: not dispatched, but its id counts
    b"id: r1:2\n"
    b"\n"
    b":\n"
    b"data: \xef\xbb\xbfbom\n\n"          # a BOM inside the stream is data
    b"id: a\x00b\n"                        # an id with NUL is ignored
    b"data: after\n\n"
    b"data: cut off"                       # an unfinished event is never dispatched
)

EXPECTED = [
    Comment("keep-alive"),
    SSEEvent("start", '{"a": 1}', "r1:0", None),
    SSEEvent("message", " two spaces\n\nline3", "r1:0", None),
    SSEEvent("token", "caf\u00e9 \u20ac", "r1:1", 1500),
    Comment(""),
    SSEEvent("message", "\ufeffbom", "r1:2", None),
    SSEEvent("message", "after", "r1:2", None),
]


def parse(chunks: list[bytes]) -> tuple[list, SSEParser]:
    parser = SSEParser()
    out = []
    for chunk in chunks:
        out += parser.feed(chunk)
    return out, parser


def test_whole_stream():
    out, parser = parse([TRICKY])
    assert out == EXPECTED
    assert parser.retry_ms == 1500
    assert parser.last_event_id == "r1:2"


def test_split_at_every_byte():
    for i in range(len(TRICKY) + 1):
        out, _ = parse([TRICKY[:i], TRICKY[i:]])
        assert out == EXPECTED, f"split at byte {i}"


def test_byte_by_byte():
    out, _ = parse([TRICKY[i:i + 1] for i in range(len(TRICKY))])
    assert out == EXPECTED


def test_crlf_split_between_cr_and_lf_is_one_line_end():
    # Were the LF taken as a second line end, the blank line would dispatch early.
    out, _ = parse([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"])
    assert out == [SSEEvent("message", "a\nb", None, None)]


def test_empty_data_line_dispatches_an_empty_event():
    out, _ = parse([b"data\n\ndata:\n\n"])
    assert out == [SSEEvent("message", "", None, None)] * 2


def test_empty_id_resets_the_last_event_id():
    out, parser = parse([b"id: 7\ndata: x\n\nid\ndata: y\n\n"])
    assert [e.id for e in out] == ["7", ""]
    assert parser.last_event_id == ""


def test_id_of_an_unfinished_event_is_not_yet_the_last():
    _, parser = parse([b"id: 1\ndata: x\n\nid: 2\ndata: y\n"])
    assert parser.last_event_id == "1"


def test_the_servers_own_stream():
    stream = (b"event: start\r\nid: abc:0\r\ndata: {\"id\": \"abc\", \"prompt_tokens\": 3}\r\n\r\n"
              b": keep-alive\r\n\r\n"
              b"event: token\r\nid: abc:1\r\ndata: {\"index\": 0, \"token_id\": 42, \"text\": \"hi\"}\r\n\r\n")
    out, _ = parse([stream[i:i + 7] for i in range(0, len(stream), 7)])
    assert [type(x).__name__ for x in out] == ["SSEEvent", "Comment", "SSEEvent"]
    assert out[0].event == "start" and out[0].id == "abc:0"
    assert out[1] == Comment("keep-alive")
    assert out[2].event == "token" and out[2].id == "abc:1" and '"token_id": 42' in out[2].data
