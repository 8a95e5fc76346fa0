"""A step's output as it crosses to the server from an engine in its own process."""
import pickle

from live.engine.step_output import StepOutput
from scheduler import FinishEvent, FinishReason, TokenEvent


def test_a_step_output_crosses_a_pipe_unchanged():
    events = [TokenEvent("a", 0, 7), FinishEvent("b", FinishReason.CANCELLED, 3, 1, 2),
              TokenEvent("c", 4, 9), FinishEvent("c", FinishReason.LENGTH, 5)]
    output = StepOutput(events, {"a": "x", "c": "é"}, {"c": "held"}, ["a"], 1234.5)
    back = pickle.loads(pickle.dumps(output))
    assert back == output
    assert [type(e) for e in back.events] == [TokenEvent, FinishEvent, TokenEvent, FinishEvent]
    assert back.events[0].token_id == 7 and back.events[1].recomputed_tokens == 2
