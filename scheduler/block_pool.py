"""A fixed pool of KV-cache blocks: reserve at admission, grow block tables as
tokens are written, release once."""
from __future__ import annotations

from .errors import DoubleRelease, InvariantBroken


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


class BlockPool:
    """Physical blocks are taken from the free list only when a table grows, but a
    reservation guarantees they will be there: the free list is never shorter than
    the reserved blocks not yet taken."""

    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free = list(range(num_blocks - 1, -1, -1))
        self._reserved = 0
        self._held: dict[str, tuple[int, list[int]]] = {}
        self.reservations = 0
        """Reservations made since the pool was built: one per admission."""
        self.releases = 0
        """Releases made since the pool was built; equals `reservations` when whole."""

    @property
    def reserved_blocks(self) -> int:
        return self._reserved

    @property
    def free_blocks(self) -> int:
        """Blocks no reservation holds."""
        return self.num_blocks - self._reserved

    @property
    def used_blocks(self) -> int:
        """Blocks already in some block table."""
        return self.num_blocks - len(self._free)

    def can_reserve(self, n: int) -> bool:
        return n <= self.num_blocks - self._reserved

    def reserve(self, seq_id: str, n: int) -> list[int]:
        """Hold `n` blocks for `seq_id`; returns its (empty) block table."""
        if seq_id in self._held:
            raise InvariantBroken(f"sequence {seq_id!r} already holds a reservation")
        if not self.can_reserve(n):
            raise InvariantBroken(f"cannot reserve {n} blocks for {seq_id!r}: {self.free_blocks} free")
        table: list[int] = []
        self._held[seq_id] = (n, table)
        self._reserved += n
        self.reservations += 1
        return table

    def extend(self, seq_id: str, n: int) -> None:
        """Hold `n` blocks more for `seq_id` (a reservation that grows as it writes)."""
        if not self.can_reserve(n):
            raise InvariantBroken(
                f"cannot extend {seq_id!r} by {n} blocks: {self.free_blocks} free")
        held, table = self._held[seq_id]
        self._held[seq_id] = (held + n, table)
        self._reserved += n

    def grow(self, seq_id: str, num_tokens: int) -> list[int]:
        """Extend the block table of `seq_id` to hold `num_tokens` tokens."""
        n, table = self._held[seq_id]
        need = -(-num_tokens // self.block_size)
        if need > n:
            raise InvariantBroken(f"sequence {seq_id!r} needs {need} blocks, reserved {n}")
        short = need - len(table)
        if short == 1:  # a decode crossing into a new block: the common case
            table.append(self._free.pop())
        elif short > 0:  # a prompt: its blocks at once, in the order pops would give
            free = self._free
            if short > len(free):
                raise InvariantBroken(f"sequence {seq_id!r} needs {short} blocks more, "
                                      f"{len(free)} are free")
            table += free[:-short - 1:-1]
            del free[-short:]
        return table

    def release(self, seq_id: str) -> None:
        """The one place blocks go back to the pool."""
        held = self._held.pop(seq_id, None)
        if held is None:
            raise DoubleRelease(seq_id)
        n, table = held
        self._free.extend(reversed(table))
        table.clear()
        self._reserved -= n
        self.releases += 1

    def is_whole(self) -> bool:
        return not self._held and self._reserved == 0 and len(self._free) == self.num_blocks
