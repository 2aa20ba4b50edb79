"""Decode steps (and short prefills) of a Llama-family model in a few tensor operations a layer,
for the engine on the CPU.

Hugging Face's forward pass of one decode step of the embedded 135M model dispatches ~5,600 tensor
operations (views, reshapes, casts, the mask builder, the cache's bookkeeping, the module calls
around each of them). At a few dozen rows each costs microseconds that add up to a tenth of the
step. ``FusedDecoder`` runs the same arithmetic with what the step needs and nothing else:

- q, k and v are one product with their weights stacked, and so are gate and up (oneDNN packed
  weights, ``packed_linear.packed``): fewer, wider products run faster at decode's few rows;
- RMSNorm is ``F.rms_norm`` in float32 (the model's own norm otherwise), rotary embeddings come
  from the model's own rotary module and Hugging Face's ``apply_rotary_pos_emb``, attention is
  ``cascade.attend`` (the shared prefix read once, key/value heads never copied, the mask made
  once a pass), and the cache is the batch's own (``cache.update``).

Prefills of up to ``packed_linear.MAX_ROWS`` token rows take it too (a tool result of a hundred
tokens: about 5 % faster, and the projections are packed only once, fused); longer ones keep
Hugging Face's forward, whose ``F.linear`` beats oneDNN's packed products at that size.

It takes a model only when it can reproduce it: a ``LlamaForCausalLM`` on the CPU with SiLU
MLPs, no projection biases, plain (or packed) linear layers and a dtype oneDNN packs here; any
other model (a peft adapter, Qwen, a GPU) keeps Hugging Face's forward. Logits equal Hugging
Face's within float rounding (the tests compare both; on the embedded model in float32 they
measured bit-identical). The packs follow the weights as ``packed_linear`` does (redone when a
weight changes; ``forget`` drops them); the engine checks the model again on
``clear_prefix_cache``. torch and transformers are imported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from arft.engines import cascade, packed_linear

if TYPE_CHECKING:
    import torch


class FusedDecoder:
    """``logits(ids, positions, mask, cache, shared)``: one decode step of ``model`` (see the module doc)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        config = model.config
        attention = model.model.layers[0].self_attn
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = attention.head_dim
        self.scale = attention.scaling
        self.intermediate = config.intermediate_size

    @classmethod
    def of(cls, model: Any) -> "FusedDecoder | None":
        """A decoder for ``model``, or ``None`` where it would not reproduce Hugging Face's forward."""
        return cls(model) if supported(model) else None

    def logits(self, ids: "torch.Tensor", positions: "torch.Tensor", mask: "torch.Tensor", cache: Any,
               shared: int = 0) -> "torch.Tensor":
        """Last-position logits ``[B, V]`` for ``ids`` ``[B, S]`` at ``positions`` ``[B, S]`` (a
        decode step, or a short prefill); ``mask`` ``[B, T]`` is 1 on the real columns of the
        cache once these tokens are appended; ``shared``: leading columns every row holds the
        same (read once by a decode step)."""
        import torch.nn.functional as F
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        model, (b, s) = self.model.model, ids.shape
        hidden = model.embed_tokens(ids)
        cos, sin = model.rotary_emb(hidden, positions)
        keep = _keep(mask, s, hidden.dtype)
        q_end, k_end = self.heads * self.head_dim, (self.heads + self.kv_heads) * self.head_dim
        for i, layer in enumerate(model.layers):
            attn, mlp = layer.self_attn, layer.mlp
            qkv = _linear(_norm(hidden, layer.input_layernorm), attn, [attn.q_proj, attn.k_proj, attn.v_proj])
            q = qkv[..., :q_end].view(b, s, self.heads, self.head_dim).transpose(1, 2)
            k = qkv[..., q_end:k_end].view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
            v = qkv[..., k_end:].view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            keys, values = cache.update(k, v, i)
            out = cascade.attend(q, keys, values, keep, shared, self.scale)
            hidden = hidden + _linear(out.reshape(b, s, q_end), attn.o_proj, [attn.o_proj])
            gate_up = _linear(_norm(hidden, layer.post_attention_layernorm), mlp, [mlp.gate_proj, mlp.up_proj])
            act = F.silu(gate_up[..., :self.intermediate]) * gate_up[..., self.intermediate:]
            hidden = hidden + _linear(act, mlp.down_proj, [mlp.down_proj])
        head = self.model.lm_head
        return _linear(_norm(hidden[:, -1], model.norm), head, [head])

def _keep(mask: "torch.Tensor", s: int, dtype: "torch.dtype") -> "torch.Tensor":
    """The additive attention mask ``[B, 1, S, T]`` (0 or -inf, in ``dtype``: made once per pass,
    not per layer) of ``s`` new tokens in the last columns of ``mask``: a column is seen where it
    is real and not after the query. A query that would see nothing (a padding position before any
    real column) sees every column instead: its output is never used, and must not be NaN."""
    import torch

    keep = mask.bool()[:, None, None, :]
    if s > 1:
        t = mask.shape[1]
        keep = keep & torch.ones(s, t, dtype=torch.bool, device=mask.device).tril(t - s)
        keep = keep | ~keep.any(dim=-1, keepdim=True)
    return torch.zeros(keep.shape, dtype=dtype, device=mask.device).masked_fill_(~keep, float("-inf"))


def supported(model: Any) -> bool:
    """Whether ``FusedDecoder`` reproduces ``model``'s forward (see the module doc)."""
    import torch
    from transformers import LlamaForCausalLM

    if type(model) is not LlamaForCausalLM:
        return False
    config, weight = model.config, model.lm_head.weight
    if (config.hidden_act != "silu" or getattr(config, "pretraining_tp", 1) != 1 or weight.device.type != "cpu"
            or not packed_linear.supports(weight.dtype) or not cascade._has_cpu_flash()):
        return False
    linear = (torch.nn.Linear, packed_linear._packed_class())
    modules = [m for layer in model.model.layers for m in layer.modules() if hasattr(m, "weight")]
    return all(type(m) in linear and m.bias is None for m in modules if m.weight.dim() == 2) \
        and type(model.lm_head) in linear and model.lm_head.bias is None


def _linear(x: "torch.Tensor", owner: Any, layers: list[Any]) -> "torch.Tensor":
    """``x`` times the stacked weights of ``layers`` (packed once, kept under ``owner``)."""
    import torch

    packed = packed_linear.packed(owner, [layer.weight for layer in layers])
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


def _norm(x: "torch.Tensor", norm: Any) -> "torch.Tensor":
    """Hugging Face's ``LlamaRMSNorm``: one fused op in float32, the module itself otherwise."""
    import torch
    import torch.nn.functional as F

    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.variance_epsilon)
    return norm(x)
