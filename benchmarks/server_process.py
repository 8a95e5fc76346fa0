"""A server under measurement, in its own process (`live.client.launch`): watched
(CPU time, by thread; RSS; /stats) and stopped with SIGTERM. Also the tiny random
model the server benchmarks serve."""
from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from live.client.launch import launched
from live.runner.models import embedded_gguf, gguf_cache

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 300
STOP_TIMEOUT_S = 120


def tiny_model_dir(directory: Path) -> Path:
    """A tiny random Llama with the embedded SmolLM2's tokenizer, as a Hugging Face
    directory: real text and detokenizing, a model that costs little."""
    tokenizer = AutoTokenizer.from_pretrained(gguf_cache(embedded_gguf()))
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2,
                         vocab_size=len(tokenizer), max_position_embeddings=2048,
                         tie_word_embeddings=True, bos_token_id=None, eos_token_id=None,
                         pad_token_id=None)
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@dataclass
class Server:
    port: int
    process: psutil.Process

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stats(self) -> dict:
        return httpx.get(self.url + "/stats", timeout=60).json()

    def cpu_s(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system

    def loop_cpu_s(self) -> float:
        """CPU time of the main thread, where uvicorn runs the event loop (HTTP, SSE,
        the hub); the step loop and torch run in other threads."""
        main = next(t for t in self.process.threads() if t.id == self.process.pid)
        return main.user_time + main.system_time

    def rss(self) -> int:
        return self.process.memory_info().rss


@contextlib.contextmanager
def serving(program: list[str], log: Path) -> Iterator[Server]:
    """`python PROGRAM --port P` on a free port, its output in `log`."""
    with launched(program=program, log=log, cwd=ROOT, start_timeout_s=START_TIMEOUT_S,
                  stop_signal=signal.SIGTERM, grace_s=STOP_TIMEOUT_S) as server:
        yield Server(server.port, psutil.Process(server.process.pid))
