"""The clients of the leak runs: a mix of readers to the end, leavers by FIN and
RST after every count of tokens, and slow readers that leave."""
from __future__ import annotations

import numpy as np

from traces import Client, LeaveHow, ReadMode


def leaky_clients(count: int, rng: np.random.Generator) -> list[Client]:
    """35% read to the end; 50% leave after 0 to 40 tokens (every count, by FIN and
    by RST); 15% read slowly (a pause per event, or a byte rate) and leave after 3
    or 10 tokens. Shuffled, so that every kind arrives throughout."""
    to_end = [Client()] * round(0.35 * count)
    leavers = [Client(leave_after_tokens=i % 41, leave_how=LeaveHow.FIN if i % 2 else LeaveHow.RST)
               for i in range(count // 2)]
    slow_reading = [{"read": ReadMode.PER_EVENT, "pause_s": 0.05},
                    {"read": ReadMode.BYTE_RATE, "bytes_per_s": 2000.0}]
    slow = [Client(**slow_reading[i // 4 % 2], leave_after_tokens=(3, 10)[i % 2],
                   leave_how=(LeaveHow.FIN, LeaveHow.RST)[i // 2 % 2])
            for i in range(count - len(to_end) - len(leavers))]
    clients = to_end + leavers + slow
    return [clients[i] for i in rng.permutation(count)]
