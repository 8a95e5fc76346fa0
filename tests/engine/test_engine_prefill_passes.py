"""With prefill passes the engine hands on each pass's first tokens as soon as the
pass has run, before its step's other passes and decodes, with their text; the
step's output leaves them out, so every token reaches its stream once, and the
tokens are those of one pass. A pass that raises is run again alone, so nothing
handed on is ever handed on twice, and a culprit ends alone with an error."""
import pytest

from scheduler import FinishEvent, FinishReason, TokenEvent

from live_server import FaultyRunner, culprit, tiny_engine
from tiny_models import tiny_llama

MODEL = tiny_llama()
PASS_TOKENS = 8
BURST = {"b": ([11, 12, 13, 14, 15], 6), "c": ([21, 22, 23, 24], 1), "d": ([31, 32, 33], 5),
         "e": ([41, 42, 43, 44, 45, 46, 47], 4)}
"""Prompts admitted in one step, beside the decode of a stream already running:
passes of [b] [c, d] [e and the decode]."""


class PassLog:
    """A runner that notes what each of its runs computes."""

    def __init__(self, runner):
        self.runner = runner
        self.eos_token_ids = runner.eos_token_ids
        self.runs: list[tuple[int, list[str]]] = []
        """Per run: the step, and the sequences it computed."""

    def execute(self, plan):
        self.runs.append((plan.index, [seq.id for seq in plan.computed]))
        return self.runner.execute(plan)

    def forget(self, seq_id):
        self.runner.forget(seq_id)


def once(picks):
    """Fails the first plan `picks` picks, not its runs again."""
    failed = []

    def fails(plan) -> bool:
        if failed or not picks(plan):
            return False
        failed.append(plan.index)
        return True
    return fails


FAULTS = {
    None: lambda plan: False,
    "first pass": once(lambda plan: plan.index == 2 and plan.computed[0].id == "b"),
    "last pass": once(lambda plan: plan.index == 2 and len(plan.computed) > 1 and plan.decodes),
    "culprit": culprit("d"),
}


def serve(engine):
    """Step until done: per sequence, its (index, token id, text) in the order
    handed on, and its finish; per early hand-over, the step and the runs made by
    then."""
    streams: dict[str, list] = {}
    finished: dict[str, FinishEvent] = {}
    early: list[tuple[int, int]] = []

    def take(output):
        for e in output.events:
            if isinstance(e, TokenEvent):
                streams.setdefault(e.seq_id, []).append(
                    (e.index, e.token_id, output.deltas[e.seq_id]))
            else:
                assert e.seq_id not in finished
                finished[e.seq_id] = e

    def hand_on(output):
        runs = engine.runner.runs
        early.append((runs[-1][0], len(runs)))
        assert all(isinstance(e, TokenEvent) and e.index == 0 for e in output.events)
        take(output)

    engine.submit("a", [1, 2, 3], 12)
    take(engine.step(hand_on))
    for seq_id, (prompt, new) in BURST.items():
        engine.submit(seq_id, prompt, new)
    while engine.has_work():
        take(engine.step(hand_on))
    return streams, finished, early


@pytest.mark.parametrize("fault", list(FAULTS), ids=lambda f: str(f))
def test_first_tokens_are_handed_on_once_before_their_step_ends(fault):
    one_pass, _ = tiny_engine(MODEL, runner_wrapper=PassLog)
    alone, alone_finished, none_early = serve(one_pass)
    assert not none_early and len(alone["c"]) == 1

    engine, _ = tiny_engine(
        MODEL, runner_wrapper=lambda runner: PassLog(FaultyRunner(runner, FAULTS[fault])),
        prefill_pass_tokens=PASS_TOKENS)
    streams, finished, early = serve(engine)

    if fault is None:
        assert [ids for index, ids in engine.runner.runs if index == 2] == [
            ["b"], ["c", "d"], ["e", "a"]]
    # two passes handed on in step 2, each as it ended (after step 1's run, the
    # pass's runs: a failed pass's included), before the last pass ran
    runs_by_then = {"first pass": (3, 4), "culprit": (2, 5)}.get(fault, (2, 3))
    assert early == [(2, runs) for runs in runs_by_then]
    culprits = {"d"} if fault == "culprit" else set()
    assert set(streams) == set(alone) - culprits
    for seq_id, made in streams.items():
        assert [index for index, *_ in made] == list(range(len(made)))
        assert made == alone[seq_id]
    assert {i: (e.reason, e.num_generated) for i, e in finished.items() if i not in culprits} == {
        i: (e.reason, e.num_generated) for i, e in alone_finished.items() if i not in culprits}
    for seq_id in culprits:
        assert finished[seq_id].reason is FinishReason.ERROR
    assert engine.core.is_drained() and engine.core.pool.reserved_blocks == 0
    # one record for the step, unless it was retried (then it is no sample of its cost)
    records = [r for r in engine.step_log.after(0) if r["step"] == 2]
    assert len(records) == (0 if fault else 1)
    if not fault:
        assert records[0]["tokens"] == 5 and records[0]["num_prefills"] == 4
