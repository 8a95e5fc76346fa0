"""Closed-loop traces: a session's requests go one after another, each its think
time after its client was done with the one before; generated conversations carry
their history; the format keeps sessions and think times."""
import json

import pytest

from traces import Client, read_trace, write_trace
from traces.__main__ import main
from traces.record import TraceRequest
from traces.sessions import Sessions
from traces.synthetic.conversations import conversations
from traces.synthetic.lengths import Fixed, Uniform


def turn(id, session, arrival=0.0, think=0.0):
    return TraceRequest(id, arrival, 8, 4, session=session, think_s=think)


def test_a_sessions_requests_wait_for_the_one_before_and_its_think_time():
    sessions = Sessions()
    a0, a1, a2 = turn("a0", "a"), turn("a1", "a", think=2.0), turn("a2", "a", arrival=9.0, think=1.0)
    assert sessions.arrived(a0, 0.0) == 0.0
    assert sessions.arrived(a1, 0.0) is None  # its session is busy
    assert sessions.arrived(TraceRequest("open", 0.5, 8, 4), 0.5) == 0.5
    assert sessions.done(a0, 3.0) == (a1, 5.0)
    assert sessions.done(a1, 6.0) is None  # nothing else has arrived: the session rests
    # a2 arrives later: it goes at its arrival, its think time after a1 being long past
    assert sessions.arrived(a2, 9.0) == 9.0
    assert sessions.done(a2, 9.5) is None
    late = turn("a3", "a", arrival=9.6, think=1.0)
    assert sessions.arrived(late, 9.6) == 10.5  # a2 was done at 9.5: then 1 s of thought
    assert sessions.done(TraceRequest("open", 0.5, 8, 4), 1.0) is None


def test_conversations_carry_their_history():
    trace = conversations(users=2, turns=3, think_s=1.5, prompt_lengths=Fixed(10),
                          output_lengths=Fixed(4), history=True)
    assert [(r.id, r.session, r.prompt_tokens, r.think_s) for r in trace[:3]] == [
        ("u0-t0", "u0", 10, 0.0), ("u0-t1", "u0", 24, 1.5), ("u0-t2", "u0", 38, 1.5)]
    plain = conversations(users=2, turns=3, prompt_lengths=Fixed(10), output_lengths=Fixed(4))
    assert {r.prompt_tokens for r in plain} == {10} and {r.think_s for r in plain} == {0.0}
    ramped = conversations(users=50, turns=2, ramp_s=10.0, prompt_lengths=Uniform(5, 9), seed=3)
    arrivals = [r.arrival_s for r in ramped]
    assert arrivals == sorted(arrivals) and 0 <= arrivals[0] and arrivals[-1] < 10.0
    assert all(ramped[2 * u].arrival_s == ramped[2 * u + 1].arrival_s for u in range(50))


def test_sessions_and_think_times_round_trip_through_the_format(tmp_path):
    trace = conversations(users=2, turns=2, think_s=0.25, history=True)
    path = tmp_path / "chat.jsonl"
    write_trace(path, trace)
    assert read_trace(path) == trace
    first = json.loads(path.read_text().splitlines()[1])
    assert (first["session"], first["think_s"]) == ("u0", 0.25)


def test_the_command_line_writes_a_closed_loop_trace(tmp_path, capsys):
    out = tmp_path / "c.jsonl"
    assert main(["sessions", "--users", "4", "--turns", "3", "--think-s", "1", "--history",
                 "--prompt-len", "fixed:20", "--output-len", "fixed:8", "--slow", "0.5",
                 "--slow-pause-s", "0.1", "-o", str(out)]) == 0
    trace = read_trace(out)
    assert len(trace) == 12 and {r.session for r in trace} == {"u0", "u1", "u2", "u3"}
    assert [r.prompt_tokens for r in trace[:3]] == [20, 48, 76]
    assert sum(r.client != Client() for r in trace) == 6
    assert "wrote 12 requests" in capsys.readouterr().out
