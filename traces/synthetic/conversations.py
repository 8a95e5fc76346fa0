"""Closed-loop traces: virtual users, each a session of turns sent one after
another with a think time between them, as load tools run "concurrency N" and
chat users hold conversations. With `history`, each turn's prompt carries the
turns before it (their prompts and answers) and its own new message."""
from __future__ import annotations

import numpy as np

from ..record import TraceRequest
from ..shaping import to_microsecond
from .client_mix import ClientMix
from .lengths import Fixed, Lengths


def conversations(
    *,
    users: int,
    turns: int,
    think_s: float = 0.0,
    ramp_s: float = 0.0,
    prompt_lengths: Lengths = Fixed(64),
    output_lengths: Lengths = Fixed(64),
    history: bool = False,
    clients: ClientMix = ClientMix(),
    seed: int = 0,
) -> list[TraceRequest]:
    """`users` sessions of `turns` requests each. User u starts at a time drawn
    uniformly in [0, ramp_s) (all at 0 without a ramp); its later turns arrive with
    it and go `think_s` after it was done with the one before. Prompt lengths are a
    turn's new message (with `history`, added to the conversation so far); ids are
    "u<user>-t<turn>", sessions "u<user>"; requests in arrival order."""
    if users < 1 or turns < 1:
        raise ValueError(f"users and turns must be at least 1, got {users} and {turns}")
    if think_s < 0 or ramp_s < 0:
        raise ValueError("think_s and ramp_s must not be negative")
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.uniform(0.0, ramp_s, users)) if ramp_s else np.zeros(users)
    messages = prompt_lengths.sample(users * turns, rng).reshape(users, turns)
    answers = output_lengths.sample(users * turns, rng).reshape(users, turns)
    mix = clients.assign(users * turns, rng)
    requests = []
    for u in range(users):
        said = 0
        for t in range(turns):
            prompt = said + int(messages[u, t]) if history else int(messages[u, t])
            requests.append(TraceRequest(
                id=f"u{u}-t{t}", arrival_s=to_microsecond(float(starts[u])),
                prompt_tokens=prompt, max_new_tokens=int(answers[u, t]),
                client=mix[u * turns + t], session=f"u{u}", think_s=think_s if t else 0.0))
            said = prompt + int(answers[u, t])
    return requests
