"""`python -m live serve …` and `python -m live replay …`."""
from __future__ import annotations

import argparse
import logging
import sys

from scheduler import ADMISSION_POLICIES, BACKLOG_POLICIES

from .client.loadgen import add_parser as add_replay_parser
from .serve_config import ServeSettings


def add_serve_parser(subparsers) -> None:
    d = ServeSettings()
    p = subparsers.add_parser("serve", help="serve a model over HTTP (SSE, OpenAI, Anthropic)",
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default=d.model,
                   help="Hugging Face directory or .gguf file; none: the embedded SmolLM2")
    p.add_argument("--device", default=d.device, choices=["cpu", "cuda"], help="where it runs")
    p.add_argument("--dtype", default=d.dtype, choices=["float32", "bfloat16", "float16"],
                   help="weights and KV cache")
    p.add_argument("--host", default=d.host, help="address to listen on")
    p.add_argument("--port", type=int, default=d.port, help="port to listen on")
    p.add_argument("--http2", action="store_true", default=d.http2,
                   help="also serve cleartext HTTP/2 (h2c, prior knowledge) on the port")
    p.add_argument("--policy", default=d.policy, choices=sorted(BACKLOG_POLICIES),
                   help="what to do with a stream whose reader falls behind")
    p.add_argument("--max-queued", type=int, default=d.max_queued,
                   help="events a reader may fall behind before pause")
    p.add_argument("--stall-timeout-s", type=float, default=d.stall_timeout_s,
                   help="a reader taking nothing this long while events wait is dropped")
    p.add_argument("--resume-grace-s", type=float, default=d.resume_grace_s,
                   help="keep a stream whose client left paused this long for a resume")
    p.add_argument("--threads", type=int, default=d.threads,
                   help="torch threads for the steps; none: torch's default")
    p.add_argument("--max-batch", type=int, default=d.max_batch,
                   help="sequences decoded together")
    p.add_argument("--num-blocks", type=int, default=d.num_blocks,
                   help="KV blocks; none: as many as --kv-cache-mb holds")
    p.add_argument("--kv-cache-mb", type=int, default=d.kv_cache_mb,
                   help="KV cache size when --num-blocks is not given")
    p.add_argument("--block-size", type=int, default=d.block_size, help="tokens per KV block")
    p.add_argument("--max-waiting", type=int, default=d.max_waiting,
                   help="waiting requests before new ones get 429")
    p.add_argument("--max-prefill-tokens", type=int, default=d.max_prefill_tokens,
                   help="prompt tokens prefilled in one step; none: no budget")
    p.add_argument("--chunked-prefill", action="store_true", default=d.chunked_prefill,
                   help="cut prompts into chunks of --max-prefill-tokens, prefilled a step at "
                        "a time beside the decodes")
    p.add_argument("--admission", default=d.admission, choices=sorted(ADMISSION_POLICIES),
                   help="reserve each request's whole length (default), or hold blocks as "
                        "tokens are written and preempt the newest when none is free")
    p.add_argument("--keepalive-s", type=float, default=d.keepalive_s,
                   help="a comment on a stream idle this long")
    p.add_argument("--step-log", default=d.step_log, help="also write one JSON line per step here")
    p.add_argument("--step-ring", type=int, default=d.step_ring,
                   help="steps kept in memory for GET /v1/steps")
    p.add_argument("--gpu-memory-fraction", type=float, default=d.gpu_memory_fraction,
                   help="on CUDA without --num-blocks: the share of the GPU's memory the "
                   "weights and the KV cache may take")
    p.add_argument("--eager", action="store_true", default=d.eager,
                   help="on CUDA: run decode steps eagerly rather than from CUDA graphs")
    p.add_argument("--replay-events", type=int, default=d.replay_events,
                   help="events each stream keeps for Last-Event-ID resumption")
    p.add_argument("--event-padding", type=int, default=d.event_padding,
                   help="benchmarks only: a comment of this many bytes after each event")
    p.set_defaults(func=run_serve)


def run_serve(args) -> int:
    from .server.app import serve

    names = ("model", "device", "dtype", "host", "port", "http2", "policy", "max_queued",
             "stall_timeout_s", "resume_grace_s", "threads", "max_batch", "num_blocks",
             "kv_cache_mb", "block_size", "max_waiting", "max_prefill_tokens",
             "chunked_prefill", "admission", "keepalive_s", "step_log", "step_ring", "gpu_memory_fraction", "eager",
             "replay_events", "event_padding")
    try:
        settings = ServeSettings(**{name: getattr(args, name) for name in names})
    except ValueError as exc:
        print(f"python -m live serve: {exc}", file=sys.stderr)
        return 2
    return serve(settings)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="python -m live")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(subparsers)
    add_replay_parser(subparsers)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
