"""What the analysis tests share: a tiny random Llama saved as a Hugging Face
directory with the embedded model's tokenizer (so the server loads it as it would
any model), and a short trace of steady, slow and leaving clients."""
from __future__ import annotations

from pathlib import Path

from traces import Client, LeaveHow, ReadMode, TraceRequest

from tiny_models import tiny_llama


def save_tiny_llama(path: Path, tokenizer) -> Path:
    model = tiny_llama(vocab_size=len(tokenizer))
    model.config.eos_token_id = None
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def mixed_trace() -> list[TraceRequest]:
    """Ten requests: two slow readers and two that leave after 5 tokens."""
    slow = Client(read=ReadMode.PER_EVENT, pause_s=0.02)
    leaver = Client(leave_after_tokens=5, leave_how=LeaveHow.RST)
    clients = [Client(), slow, Client(), leaver, Client(), slow, leaver, Client(), Client(), Client()]
    return [TraceRequest(f"t{i}", 0.1 * i, 8 + 5 * i, 12 + i, client=c) for i, c in enumerate(clients)]
