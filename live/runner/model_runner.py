"""Executes the core's step plans with a model over the paged KV cache: prefill the
admitted prompts (or their chunks) and decode every running sequence, in one pass.

Decode attention reads the cache in place (`attention.decode_attention_for`): on
CUDA the Triton kernel, and when asked for, decode-only steps replay CUDA graphs
(`cuda_graphs`), the device time of each step's forward measured with CUDA events;
on the CPU a kernel compiled for the model's shape (`cpu.attention`), which the
rows of short prompts read their prompts through as well, beside bf16 projections on
weights packed once for oneDNN (`linear`) and Llama's elementwise steps as compiled
kernels (`layer_ops`)."""
from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable

import torch

from scheduler import Sequence, StepPlan

from .architectures import build_architecture, kv_layout
from .attention import DecodeAttention, decode_attention_for
from .kv_cache import PagedKVCache, blocks_for_budget, slot_mapping
from .linear import packs
from .models import LoadedModel, eos_token_ids, max_model_len
from .prefill_attention import CachedChunk, PromptSpans, cached_chunk_attention, prefill_attention_for
from .sampler import Sampler

log = logging.getLogger("twinstep.runner")

PREFILL_PASS_ROWS = 2048
"""On the CPU, the most rows one forward pass of a prefill packs (a prompt longer
than that runs alone): beyond it a layer's activations outgrow the caches, and
SmolLM2 prefilling 128 prompts of 48 tokens took 3.0 s in one pass of 6,144 rows
against 2.3 s in three (one thread)."""


TABLED_CONTEXT = 128
"""On a decode attention that attends prompts (the CPU kernel), the longest context
a prefill's rows read through their block tables, one row at a time; a longer chunk
takes SDPA, whose matrix products outrun rows beyond it (SmolLM2 in fp32 on one
thread, a prompt of 512 tokens: 1.7 against 1.4 s, of 2,048: 14.6 against 7.0 s).
Below it the kernel is level with SDPA or ahead: 128 prompts of 48 tokens in bf16
spent 235 to 292 ms in attention against 474 with one SDPA call a prompt and layer."""


BF16_WITHOUT_INSTRUCTIONS = (
    "bfloat16 on a CPU without AMX or AVX-512 bf16 (oneDNN bf16: no): torch multiplies "
    "bf16 matrices without those instructions, several times slower than float32 once "
    "batches grow (SmolLM2 on an AVX2 host: a decode step of 128 streams 2.2 s against "
    "0.41 s, their prefill 85 s against 14 s; one stream's decode 36 against 87 ms); "
    "--dtype float32 is the fast choice on this CPU")
"""Said when a CPU runner is built in bf16 where its matmuls have no bf16 instructions."""


class ModelRunner:
    def __init__(self, loaded_or_model: LoadedModel | torch.nn.Module, num_blocks: int,
                 block_size: int, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, seed: int = 0, cuda_graph_max_batch: int = 0):
        """`cuda_graph_max_batch` above 0 captures decode steps of up to that many
        sequences as CUDA graphs (CUDA with Triton only)."""
        if isinstance(loaded_or_model, LoadedModel):
            model = loaded_or_model.model
            self.eos_token_ids = loaded_or_model.eos_token_ids
        else:
            model = loaded_or_model
            self.eos_token_ids = eos_token_ids(model)
        self.device = torch.device(device)
        self.block_size = block_size
        self.vocab_size = model.config.vocab_size
        if self.device.type == "cpu" and dtype == torch.bfloat16 and not packs(self.device, dtype):
            log.warning(BF16_WITHOUT_INSTRUCTIONS)
        self.arch = build_architecture(model, self.device, dtype)
        self.decode_attention = decode_attention_for(self.device, dtype, block_size, self.arch.heads,
                                                     self.arch.layout)
        self.prefill_attention = prefill_attention_for(self.device)
        self.pass_rows = PREFILL_PASS_ROWS if self.device.type == "cpu" else None
        if cuda_graph_max_batch and not _runs_triton(self.decode_attention):
            raise ValueError(f"CUDA graphs need a CUDA device with triton installed "
                             f"(device {self.device})")
        # The block past the pool's ids takes the K/V writes of rows that pad a graph's batch.
        spare = 1 if cuda_graph_max_batch else 0
        self.cache = PagedKVCache(self.arch.layout, num_blocks + spare, block_size, self.device, dtype)
        self.sampler = Sampler(seed, self.device)
        self.last_device_s: float | None = None  # of the last `execute`, on CUDA only
        self.times_device = self.device.type == "cuda"
        self._events: tuple[torch.cuda.Event, torch.cuda.Event] | None = None
        self.graphs = None
        if cuda_graph_max_batch:
            from .cuda_graphs import DecodeGraphs
            widest = min(num_blocks, -(-max_model_len(model.config) // block_size))
            with torch.inference_mode():
                self.graphs = DecodeGraphs(self._decode_forward, cuda_graph_max_batch, widest,
                                           num_blocks * block_size, self.device)

    @staticmethod
    def blocks_for_budget(loaded_or_model: LoadedModel | torch.nn.Module, budget_bytes: int,
                          block_size: int, dtype: torch.dtype = torch.float32) -> int:
        """How many KV blocks `budget_bytes` holds for this model."""
        model = getattr(loaded_or_model, "model", loaded_or_model)
        return blocks_for_budget(budget_bytes, kv_layout(model.config), block_size, dtype)

    @torch.inference_mode()
    def execute(self, plan: StepPlan) -> list[int]:
        """One token per sequence, in `plan.prefills + plan.decodes` order."""
        if not self.times_device:
            return self.sampler.sample(self.forward_logits(plan), plan.sequences)
        self._events = None
        tokens = self.sampler.sample(self.forward_logits(plan), plan.sequences)
        if self._events is None:  # nothing to run
            self.last_device_s = None
        else:
            # Sampling's `.tolist()` has waited for the stream, so both events are done.
            start, end = self._events
            self.last_device_s = start.elapsed_time(end) / 1000
        return tokens

    def forget(self, seq_id: str) -> None:
        """Drop what the runner keeps for a finished sequence (its sampling state)."""
        self.sampler.forget(seq_id)

    @torch.inference_mode()
    def forward_logits(self, plan: StepPlan) -> torch.Tensor:
        """Last-position logits `[sequences, vocab]`, in `plan.prefills + plan.decodes` order."""
        if plan.prefills or plan.partials:
            return self.prefill(plan.prefills, plan.decodes, plan.partials)
        if plan.decodes:
            return self.decode(plan.decodes)
        return torch.empty((0, self.vocab_size), device=self.device)

    def prefill(self, seqs: list[Sequence], decodes: list[Sequence] = (),
                partials: list[Sequence] = ()) -> torch.Tensor:
        """Each sequence's planned chunk (`seq.chunk` tokens from `seq.prefill_start`:
        the whole prompt unless prefill is chunked) in one packed batch, and the
        step's decodes riding along as rows of the same pass: the weights are read
        once per step, not once for the prompts and again for the decodes. A chunk
        that starts a prompt attends causally to itself; a later one also reads the
        prompt's earlier tokens from the cache. A sequence re-admitted after
        preemption has its output prefilled again behind its prompt. Logits for
        `seqs` (whose chunk ends their prefill) and `decodes`, not for `partials`.

        On the CPU a batch of more than `PREFILL_PASS_ROWS` rows runs as several
        passes of whole chunks, the decodes in the last."""
        passes = _passes(seqs, partials, self.pass_rows)
        # seqs come first and in order, so the passes' logits follow `seqs`, then `decodes`
        logits = [self._prefill_pass(ending, partial, decodes if i == len(passes) - 1 else ())
                  for i, (ending, partial) in enumerate(passes)]
        return logits[0] if len(logits) == 1 else torch.cat(logits)

    def _prefill_pass(self, seqs: list[Sequence], partials: list[Sequence],
                      decodes: list[Sequence]) -> torch.Tensor:
        chunks = [*seqs, *partials]
        # rows: prompts that start in the pass, chunks that continue one, the chunks
        # read through their block tables, then the decodes (see `_attention`)
        order = sorted(chunks, key=lambda seq: 2 if self._tabled(seq) else seq.prefill_start > 0)
        ids, positions, slots = [], [], []
        last_row: dict[str, int] = {}
        for seq in order:
            prompt = seq.request.payload.prompt_ids
            if len(prompt) != seq.prompt_len:
                raise ValueError(f"sequence {seq.id!r}: {len(prompt)} prompt ids, "
                                 f"prompt_len {seq.prompt_len}")
            start, n = seq.prefill_start, seq.chunk
            ids.extend((prompt + tuple(seq.output))[start:start + n])
            positions.extend(range(start, start + n))
            slots.extend(slot_mapping(seq.block_table, start, start + n, self.block_size))
            last_row[seq.id] = len(ids) - 1
        packed = len(ids)
        last_rows = [last_row[seq.id] for seq in seqs]
        if decodes:
            d_ids, d_positions, d_slots, _, _ = self._decode_rows(decodes)
            ids += d_ids
            positions += d_positions
            slots += d_slots
            last_rows += range(packed, packed + len(decodes))
        slots_t = self._tensor(slots)
        attention = self._attention(order, decodes)

        def attend(layer, q, k, v, scale):
            self.cache.write(layer, slots_t, k, v)
            return attention(layer, q, k, v, scale)

        ids_t, positions_t, last_rows_t = map(self._tensor, (ids, positions, last_rows))
        return self._timed(lambda: self.arch.forward(ids_t, positions_t, attend, last_rows_t))

    def _tabled(self, seq: Sequence) -> bool:
        """Whether a chunk's rows read their context through its block table, with
        the decodes: on a decode attention that attends prompts, when the chunk ends
        within `TABLED_CONTEXT` tokens."""
        return (self.decode_attention.attends_prompts
                and seq.prefill_start + seq.chunk <= TABLED_CONTEXT)

    def _attention(self, chunks: list[Sequence], decodes: list[Sequence]):
        """A pass's attention, its rows those of `chunks` (ordered as `_prefill_pass`
        orders them) then `decodes`: each prompt that starts in the pass causal over
        itself, each chunk that continues one over the cache, then one call of the
        decode attention for the rest: the decodes and the `_tabled` chunks, whose
        row at position p reads positions 0 to p through the block table."""
        starts, lengths, cached = [], [], []
        tables, rows, lens = [], [], []
        row = 0
        for seq in chunks:
            start, n = seq.prefill_start, seq.chunk
            if self._tabled(seq):
                tables.append(seq.block_table)
                rows.append(n)
                lens.extend(range(start + 1, start + n + 1))
            elif start:
                cached.append(CachedChunk.build(row, start, n, slot_mapping(
                    seq.block_table, 0, start + n, self.block_size), self.device))
            else:
                starts.append(row)
                lengths.append(n)
            row += n
        spanned, fresh = row - sum(rows), sum(lengths)
        prompts = self.prefill_attention.layout(PromptSpans(starts, lengths)) if lengths else None
        context = None
        if tables or decodes:
            tables += [seq.block_table for seq in decodes]
            lens += [seq.num_tokens for seq in decodes]
            if rows:
                context = self.decode_attention.context(tables, lens, rows + [1] * len(decodes))
            else:
                context = self.decode_attention.context(tables, lens)

        def attention(layer, q, k, v, scale):
            k_cache, v_cache = self.cache.keys[layer], self.cache.values[layer]
            out = []
            if lengths:
                out.append(self.prefill_attention(q[:fresh], k[:fresh], v[:fresh], prompts, scale))
            out += [cached_chunk_attention(q[chunk.rows], k_cache, v_cache, chunk, scale)
                    for chunk in cached]
            if context is not None:
                out.append(self.decode_attention(q[spanned:], k_cache, v_cache, context, scale))
            return out[0] if len(out) == 1 else torch.cat(out)

        return attention

    def decode(self, seqs: list[Sequence]) -> torch.Tensor:
        """One token per sequence (its last, at position num_tokens - 1) attending to
        its whole context through its block table. The one place a decode-only step
        runs: from a captured CUDA graph when one holds the batch."""
        ids, positions, slots, tables, lens = self._decode_rows(seqs)
        if self.graphs is not None and self.graphs.fits(tables):
            return self._timed(lambda: self.graphs.run(ids, positions, slots, tables, lens))
        inputs = (*map(self._tensor, (ids, positions, slots)), self.decode_attention.context(tables, lens))
        return self._timed(lambda: self._decode_forward(*inputs))

    def _timed(self, forward: Callable[[], torch.Tensor]) -> torch.Tensor:
        """`forward()` between two CUDA events: the step's device time is its forward
        alone, not the GPU idling while the host builds inputs or samples."""
        if not self.times_device:
            return forward()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        logits = forward()
        end.record()
        self._events = start, end
        return logits

    def _decode_forward(self, ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                        context) -> torch.Tensor:
        def attend(layer, q, k, v, scale):
            self.cache.write(layer, slots, k, v)
            return self.decode_attention(q, self.cache.keys[layer], self.cache.values[layer],
                                         context, scale)

        return self.arch.forward(ids, positions, attend, None)

    def _decode_rows(self, seqs: list[Sequence]):
        """Token ids, positions and cache slots of the decoding sequences, their block
        tables and context lengths."""
        positions = [seq.num_tokens - 1 for seq in seqs]
        slots = [slot_mapping(seq.block_table, p, p + 1, self.block_size)[0]
                 for seq, p in zip(seqs, positions)]
        return ([seq.last_token for seq in seqs], positions, slots,
                [seq.block_table for seq in seqs], [seq.num_tokens for seq in seqs])

    def _tensor(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.device)


def _passes(seqs: list[Sequence], partials: list[Sequence],
            most_rows: int | None) -> list[tuple[list[Sequence], list[Sequence]]]:
    """The chunks of a prefill cut, in order, into passes of at most `most_rows`
    rows (None: one pass), a longer chunk in a pass of its own; each pass as the
    chunks that end their prefill and those that do not."""
    passes: list[tuple[list[Sequence], list[Sequence]]] = [([], [])]
    rows = 0
    for i, seq in enumerate([*seqs, *partials]):
        if most_rows is not None and rows and rows + seq.chunk > most_rows:
            passes.append(([], []))
            rows = 0
        passes[-1][i >= len(seqs)].append(seq)
        rows += seq.chunk
    return passes


def _runs_triton(attention: DecodeAttention) -> bool:
    if importlib.util.find_spec("triton") is None:
        return False
    from .triton_attention import TritonDecodeAttention
    return isinstance(attention, TritonDecodeAttention)
