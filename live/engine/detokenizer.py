"""Incremental detokenization: text deltas that never split a UTF-8 character,
and stop strings matched on the text across token boundaries."""
from __future__ import annotations

import functools
from typing import Callable

from tokenizers.decoders import DecodeStream

REPLACEMENT = "\ufffd"


def decoder_of(tokenizer) -> Callable[[list[int]], str]:
    """The tokenizer's decode, special tokens skipped. For a fast tokenizer that
    cleans up no spaces, transformers' decode only wraps its Rust tokenizer's, at
    several microseconds of Python a call: call that one at once."""
    backend = _rust_backend(tokenizer)
    if backend is not None:
        return functools.partial(backend.decode, skip_special_tokens=True)
    return functools.partial(tokenizer.decode, skip_special_tokens=True)


def _rust_backend(tokenizer):
    """The Rust tokenizer under a fast tokenizer that cleans up no spaces, else None."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and getattr(tokenizer, "clean_up_tokenization_spaces", True) is False:
        return backend
    return None


class TextStream:
    """Turns one sequence's token ids into text deltas.

    Byte-level tokenizers can cut a character across tokens; decoding such a prefix
    yields U+FFFD, so text is held back until the bytes complete. Text that could be
    the start of a stop string is held back too, so a stop string never reaches the
    client. Under a Rust tokenizer the tokenizers library's own incremental decoder
    (`DecodeStream`) makes each token's text, in one call; otherwise two decodes of a
    short window do, as that decoder does inside."""

    def __init__(self, tokenizer, prompt_ids: tuple[int, ...] = (), stop: tuple[str, ...] = ()):
        self._decode = decoder_of(tokenizer)
        # decode with a little prompt context so leading spaces come out right
        self._ids: list[int] = list(prompt_ids[-4:])
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._backend = _rust_backend(tokenizer)
        self._stepper = None
        # a context that ends inside a character would leak its bytes into the first
        # piece: such a sequence decodes by windows
        if self._backend is not None and not self._decode(self._ids).endswith(REPLACEMENT):
            self._stepper = DecodeStream(skip_special_tokens=True)
            for token_id in self._ids:  # the context read, its text not emitted
                self._stepper.step(self._backend, token_id)
        self._stop = tuple(s for s in stop if s)
        self._pending = ""  # decoded but not yet emitted (possible stop prefix)
        self.text = ""      # everything emitted so far
        self.stopped = False

    def push(self, token_id: int) -> str:
        """Add one token; return the text that may now be emitted."""
        if self.stopped:
            return ""
        self._ids.append(token_id)
        piece = (self._stepper.step(self._backend, token_id) if self._stepper is not None
                 else self._window_piece())
        if not piece:
            return ""  # an unfinished character: wait for its remaining bytes
        self._pending += piece
        # where flush decodes from, if the sequence ends inside a character
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._ids)
        return self._release()

    def _window_piece(self) -> str | None:
        decode = self._decode
        prefix = decode(self._ids[self._prefix_offset:self._read_offset])
        full = decode(self._ids[self._prefix_offset:])
        if full.endswith(REPLACEMENT) or len(full) <= len(prefix):
            return None
        return full[len(prefix):]

    def flush(self) -> str:
        """At the end of the sequence: whatever was held back, stop prefixes included."""
        if self.stopped:
            return ""
        tail = self._decode(self._ids[self._prefix_offset:])
        prefix = self._decode(self._ids[self._prefix_offset:self._read_offset])
        out = self._pending + tail[len(prefix):]
        self._pending = ""
        self.text += out
        return out

    def _release(self) -> str:
        # Emitted text never ends with the start of a stop string (that is held in
        # _pending), so a stop string can only begin inside _pending.
        out = self._pending
        if not self._stop:
            self._pending = ""
            self.text += out
            return out
        cut = _first_stop(out, self._stop)
        if cut is not None:
            out = out[:cut]
            self.stopped = True
            self._pending = ""
        else:
            hold = _stop_prefix_len(out, self._stop)
            out, self._pending = out[:len(out) - hold], out[len(out) - hold:]
        self.text += out
        return out


def _first_stop(text: str, stops: tuple[str, ...]) -> int | None:
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else None


def _stop_prefix_len(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest suffix of `text` that begins some stop string."""
    best = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), best, -1):
            if s.startswith(text[-n:]):
                best = n
                break
    return best
