"""Per-family forward passes over a flat batch of tokens, with weights taken from a
transformers model. Attention is handed in (`Attend`), so the same layers serve
prefill and paged decode.

Projections are `linear.projection`s, their weights laid out once for the device;
a Llama layer's elementwise steps are `layer_ops`. A forward pass takes
`input_ids` and `positions` (`[tokens]`) and returns the logits of the rows
`last_rows` asks for (None: every row): the vocabulary is projected for those
rows alone."""
from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from .kv_cache import KVLayout
from .layer_ops import activation, layer_ops_for
from .linear import projection


class Attend(Protocol):
    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 scale: float) -> torch.Tensor:
        """q `[tokens, heads, head_dim]`, k and v `[tokens, kv_heads, head_dim]`."""


class Architecture(Protocol):
    layout: KVLayout
    heads: int  # of the queries

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attend: Attend,
                last_rows: torch.Tensor | None) -> torch.Tensor: ...


def kv_layout(config) -> KVLayout:
    if config.model_type == "gpt2":
        return KVLayout(config.n_layer, config.n_head, config.n_embd // config.n_head)
    if config.model_type == "llama":
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return KVLayout(config.num_hidden_layers, config.num_key_value_heads, head_dim)
    raise _unsupported(config)


def build_architecture(model, device: torch.device | str, dtype: torch.dtype) -> Architecture:
    family = _FAMILIES.get(model.config.model_type)
    if family is None:
        raise _unsupported(model.config)
    return family(model, device, dtype)


def _unsupported(config) -> NotImplementedError:
    return NotImplementedError(f"model family {config.model_type!r} is not supported "
                               f"({', '.join(_FAMILIES)})")


class _Weights:
    """Copies of a model's parameters on the runner's device and dtype."""

    def __init__(self, device, dtype):
        self.device, self.dtype = device, dtype

    def __call__(self, *params: torch.Tensor | None) -> torch.Tensor | None:
        """One parameter, or several stacked along the output dimension (a fused
        projection); None for an absent bias."""
        if params[0] is None:
            return None
        return torch.cat([p.detach() for p in params]).to(self.device, self.dtype).contiguous()


class GPT2:
    """Learned positions, pre-LayerNorm blocks, fused QKV, GELU MLP, tied head."""

    def __init__(self, model, device, dtype):
        config = model.config
        if config.add_cross_attention:
            raise NotImplementedError("GPT-2 with cross-attention is not a causal LM to serve")
        take = _Weights(device, dtype)
        body = model.transformer
        self.layout = kv_layout(config)
        self.heads, self.eps = config.n_head, config.layer_norm_epsilon
        self.act = activation(config.activation_function)
        self.wte, self.wpe = take(body.wte.weight), take(body.wpe.weight)
        self.ln_f = (take(body.ln_f.weight), take(body.ln_f.bias))
        tied = model.lm_head.weight is body.wte.weight
        self.lm_head = projection(self.wte if tied else take(model.lm_head.weight), None)
        # Conv1D keeps weights as [in, out]; F.linear wants [out, in].
        self.blocks = [{
            "ln_1": (take(b.ln_1.weight), take(b.ln_1.bias)),
            "ln_2": (take(b.ln_2.weight), take(b.ln_2.bias)),
            "qkv": projection(take(b.attn.c_attn.weight.T), take(b.attn.c_attn.bias)),
            "out": projection(take(b.attn.c_proj.weight.T), take(b.attn.c_proj.bias)),
            "fc": projection(take(b.mlp.c_fc.weight.T), take(b.mlp.c_fc.bias)),
            "proj": projection(take(b.mlp.c_proj.weight.T), take(b.mlp.c_proj.bias)),
        } for b in body.h]
        head_dim = self.layout.head_dim
        self.scales = [(head_dim ** -0.5 if config.scale_attn_weights else 1.0)
                       / (i + 1 if config.scale_attn_by_inverse_layer_idx else 1)
                       for i in range(config.n_layer)]

    def _norm(self, x, weights):
        return F.layer_norm(x, x.shape[-1:], *weights, eps=self.eps)

    def forward(self, input_ids, positions, attend, last_rows):
        x = self.wte[input_ids] + self.wpe[positions]
        n, width = x.shape
        dim = self.layout.head_dim
        for i, block in enumerate(self.blocks):
            q, k, v = block["qkv"](self._norm(x, block["ln_1"])).split(width, -1)
            a = attend(i, q.view(n, -1, dim), k.view(n, -1, dim), v.view(n, -1, dim), self.scales[i])
            x = x + block["out"](a.reshape(n, width))
            h = self.act(block["fc"](self._norm(x, block["ln_2"])))
            x = x + block["proj"](h)
        if last_rows is not None:
            x = x[last_rows]
        return self.lm_head(self._norm(x, self.ln_f))


class Llama:
    """RMSNorm, rotary positions, grouped-query attention, SiLU-gated MLP."""

    def __init__(self, model, device, dtype):
        config = model.config
        take = _Weights(device, dtype)
        body = model.model
        self.layout = kv_layout(config)
        self.heads = config.num_attention_heads
        self.ops = layer_ops_for(torch.device(device), dtype, config.rms_norm_eps, config.hidden_act)
        self.scale = self.layout.head_dim ** -0.5
        self.embed = take(body.embed_tokens.weight)
        self.norm = take(body.norm.weight)
        tied = model.lm_head.weight is body.embed_tokens.weight
        self.lm_head = projection(self.embed if tied else take(model.lm_head.weight), None)
        # One matmul for q, k and v, and one for gate and up.
        self.layers = [{
            "in_norm": take(l.input_layernorm.weight),
            "post_norm": take(l.post_attention_layernorm.weight),
            "qkv": projection(
                take(l.self_attn.q_proj.weight, l.self_attn.k_proj.weight, l.self_attn.v_proj.weight),
                take(l.self_attn.q_proj.bias, l.self_attn.k_proj.bias, l.self_attn.v_proj.bias)),
            "o": projection(take(l.self_attn.o_proj.weight), take(l.self_attn.o_proj.bias)),
            "gate_up": projection(take(l.mlp.gate_proj.weight, l.mlp.up_proj.weight),
                                  take(l.mlp.gate_proj.bias, l.mlp.up_proj.bias)),
            "down": projection(take(l.mlp.down_proj.weight), take(l.mlp.down_proj.bias)),
        } for l in body.layers]
        inv_freq, self.rope_scaling = rope_frequencies(config)
        self.inv_freq = inv_freq.to(device)

    def _rotary(self, positions, dtype):
        angles = positions.float()[:, None] * self.inv_freq
        angles = torch.cat((angles, angles), -1)[:, None, :]  # broadcast over heads
        return ((angles.cos() * self.rope_scaling).to(dtype),
                (angles.sin() * self.rope_scaling).to(dtype))

    def forward(self, input_ids, positions, attend, last_rows):
        x = self.embed[input_ids]
        n = x.shape[0]
        layout = self.layout
        dim = layout.head_dim
        q_width, kv_width = self.heads * dim, layout.kv_heads * dim
        cos, sin = self._rotary(positions, x.dtype)
        ops = self.ops
        # Each layer ends in the residual connection and the norm that reads it,
        # one step: the next layer's input norm, or after the last the final norm.
        h = ops.rms_norm(x, self.layers[0]["in_norm"])
        norms = [layer["in_norm"] for layer in self.layers[1:]] + [self.norm]
        for i, (layer, next_norm) in enumerate(zip(self.layers, norms)):
            qkv = layer["qkv"](h)
            # q and k rotated together: one pass of the rotation, not two
            qk = ops.rotate(qkv[:, :q_width + kv_width].view(n, -1, dim), cos, sin)
            q, k = qk.split((self.heads, layout.kv_heads), 1)
            a = attend(i, q, k, qkv[:, q_width + kv_width:].view(n, -1, dim), self.scale)
            h = ops.add_rms_norm(x, layer["o"](a.reshape(n, q_width)), layer["post_norm"])
            h = ops.add_rms_norm(x, layer["down"](ops.gated(layer["gate_up"](h))), next_norm)
        if last_rows is not None:
            h = h[last_rows]
        return self.lm_head(h)


_FAMILIES = {"gpt2": GPT2, "llama": Llama}

# Rope types whose frequencies depend only on the config, not on the length seen so far.
_STATIC_ROPE = ("linear", "llama3", "yarn")


def rope_frequencies(config) -> tuple[torch.Tensor, float]:
    """Inverse frequencies and the cos/sin scaling, honouring `rope_theta` and the
    config's rope scaling."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    rope_type = params.get("rope_type", "default")
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        raise NotImplementedError("partial rotary embeddings are not supported")
    if rope_type == "default":
        theta = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        dim = kv_layout(config).head_dim
        return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)), 1.0
    if rope_type in _STATIC_ROPE:
        inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, device="cpu")
        return inv_freq.float(), float(scaling)
    raise NotImplementedError(
        f"rope scaling {rope_type!r} is not supported (default, {', '.join(_STATIC_ROPE)}): "
        f"its frequencies change with the sequence length")
