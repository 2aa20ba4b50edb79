"""Decode steps and prefills of a Llama-family model in a few tensor operations a layer, for the
engine on the CPU.

Hugging Face's forward pass of one decode step of the embedded 135M model dispatches ~5,600 tensor
operations (views, reshapes, casts, the mask builder, the cache's bookkeeping, the module calls
around each of them). At a few dozen rows each costs microseconds that add up to a tenth of the
step. ``FusedPass`` runs the same arithmetic with what the step needs and nothing else:

- q, k and v are one product with their weights stacked, and so are gate and up (oneDNN packed
  weights, ``packed_linear.packed``): fewer, wider products run faster at decode's few rows;
- RMSNorm is ``F.rms_norm`` in float32 (the model's own norm otherwise), rotary embeddings come
  from the model's own rotary module and Hugging Face's ``apply_rotary_pos_emb``, attention is
  ``cascade.attend`` (the shared prefix read once, the rows' masked holes skipped, key/value
  heads never copied, the mask made once a pass), and the cache is the batch's own (``cache.update``);
- where arft's CPU kernels run (``arft.cpu.kernels``, AVX-512), decode steps' attention
  over the rows' own columns is theirs, and so are RMSNorm (with the residual add before it), the
  rotary embedding (in place in the q/k/v product's output) and ``silu(gate) * up``, one call each.

Prefills take it too, without their padding (``arft.engines.transformers.ragged``): the rows' real new tokens
run as one sequence, and each row attends over its own real columns. A batched admission of tool
results (24 rows, 22 % padding) ran 1.4x faster than Hugging Face's padded forward. Prefills of
more than ``packed_linear.MAX_ROWS`` real tokens use ``F.linear``, which beats oneDNN's packed
products at that size.

It takes a model only when it can reproduce it: a ``LlamaForCausalLM`` on the CPU with SiLU
MLPs, no projection biases, plain (or packed) linear layers and a dtype oneDNN packs here, or
such a model under plain peft LoRA adapters (their products packed beside the base layers':
``arft.cpu.lora_products``); any other model (DoRA, Qwen, a GPU) keeps Hugging Face's forward. Logits equal Hugging
Face's within float rounding (the tests compare both; on the embedded model in float32 they
measured bit-identical). The packs follow the weights as ``packed_linear`` does (redone when a
weight changes; ``forget`` drops them); the engine checks the model again on
``clear_prefix_cache``. torch and transformers are imported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from arft.cpu import cascade
from arft.cpu import lora_products
from arft.cpu import packed_linear
from arft.models import peft_layers
from arft.engines.transformers.ragged import RaggedRows

if TYPE_CHECKING:
    import torch

    from arft.cpu.kernels import CpuKernels
    from arft.engines.transformers.kv_batch import PassInputs


class FusedPass:
    """``logits(ids, positions, mask, cache, shared)``: a decode step or a prefill of ``model`` (module doc)."""

    def __init__(self, model: Any, kernel: "CpuKernels | None" = None) -> None:
        self.model = model = peft_layers.unwrap(model)
        self.adapted = [m for layer in model.model.layers for m in layer.modules() if peft_layers.is_lora(m)]
        """The model's LoRA layers (none without adapters)."""
        config = model.config
        attention = model.model.layers[0].self_attn
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = attention.head_dim
        self.scale = attention.scaling
        self.intermediate = config.intermediate_size
        self.skip_holes = True
        """Decode steps leave out the masked holes of their rows' columns (``cascade.hole_split``)."""
        dtype = model.model.embed_tokens.weight.dtype
        self.kernel = kernel if kernel is not None and kernel.supports(
            dtype, self.heads // self.kv_heads, self.head_dim) else None
        """arft's CPU kernels, where they run this model (``arft.cpu.kernels``)."""

    @classmethod
    def of(cls, model: Any, kernel: "CpuKernels | None" = None) -> "FusedPass | None":
        """A fused pass for ``model`` (decode steps' attention on ``kernel`` where it supports the
        model), or ``None`` where it would not reproduce Hugging Face's forward."""
        return cls(model, kernel) if supported(model) else None

    def runs_now(self) -> bool:
        """Whether a pass now may be fused: the adapters (if any) are still on, unmerged, one
        active, dropout off (``peft_layers.active_adapter``); otherwise Hugging Face's forward runs it."""
        return all(peft_layers.active_adapter(layer) is not None for layer in self.adapted)

    def logits(self, ids: "torch.Tensor", positions: "torch.Tensor", mask: "torch.Tensor", cache: Any,
               shared: int = 0) -> "torch.Tensor":
        """Last-position logits ``[B, V]`` for ``ids`` ``[B, S]`` at ``positions`` ``[B, S]``;
        ``mask`` ``[B, T]`` is 1 on the real columns of the cache once these tokens are appended.
        A decode step (``S == 1``) may read ``shared`` leading columns once for all rows; a
        prefill (``S > 1``) runs only its real tokens (``RaggedRows``: every row needs one)."""
        if ids.shape[1] == 1:
            return self._step(ids, positions, mask, cache, shared)
        return self._prefill(ids, positions, mask, cache)

    def _step(self, ids: "torch.Tensor", positions: "torch.Tensor", mask: "torch.Tensor", cache: Any,
              shared: int) -> "torch.Tensor":
        """One token a row: cascade attention over the batch's cache (``cascade.attend``)."""
        b, s = ids.shape
        hidden = self.model.model.embed_tokens(ids)
        keep, split = self._step_masks(mask, shared, hidden.dtype)

        def attend(i: int, q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor") -> "torch.Tensor":
            keys, values = cache.update(k, v, i)
            return cascade.attend(q, keys, values, keep, shared, self.scale, split, self.kernel).reshape(b, s, -1)

        return self._head(self._layers(hidden, positions, attend)[:, -1])

    def _prefill(self, ids: "torch.Tensor", positions: "torch.Tensor", mask: "torch.Tensor",
                 cache: Any) -> "torch.Tensor":
        """The rows' real new tokens as one sequence (no padding runs); each row attends over its
        own real columns (``RaggedRows``)."""
        rows = RaggedRows(mask[:, -ids.shape[1]:], mask, self.model.lm_head.weight.dtype)
        hidden = self.model.model.embed_tokens(rows.pack(ids))[None]

        def attend(i: int, q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor") -> "torch.Tensor":
            keys, values = cache.update(rows.unpack(k), rows.unpack(v), i)
            return rows.attend(q, keys, values, self.scale)

        return self._head(self._layers(hidden, rows.pack(positions)[None], attend)[0, rows.last])

    def step_and_prefill(self, step: "PassInputs", fill: "PassInputs") -> tuple["torch.Tensor", "torch.Tensor"]:
        """A decode step of one batch and a prefill of others in one pass (their tokens share the
        projections; each attends over its own cache): the last-position logits of each."""
        import torch

        b, shared = step.ids.shape[0], step.shared
        rows = RaggedRows(fill.mask[:, -fill.ids.shape[1]:], fill.mask, self.model.lm_head.weight.dtype)
        hidden = self.model.model.embed_tokens(torch.cat([step.ids.reshape(-1), rows.pack(fill.ids)]))[None]
        keep, split = self._step_masks(step.mask, shared, hidden.dtype)

        def attend(i: int, q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor") -> "torch.Tensor":
            one = [x[0, :, :b].transpose(0, 1).unsqueeze(2) for x in (q, k, v)]  # [b, heads, 1, head_dim]
            keys, values = step.cache.update(one[1], one[2], i)
            decoded = cascade.attend(one[0], keys, values, keep, shared, self.scale, split, self.kernel
                                     ).reshape(1, b, -1)
            keys, values = fill.cache.update(rows.unpack(k[:, :, b:]), rows.unpack(v[:, :, b:]), i)
            return torch.cat([decoded, rows.attend(q[:, :, b:], keys, values, self.scale)], dim=1)

        hidden = self._layers(hidden, torch.cat([step.positions.reshape(-1), rows.pack(fill.positions)])[None],
                              attend)
        logits = self._head(hidden[0, torch.cat([torch.arange(b, device=hidden.device), b + rows.last])])
        return logits[:b], logits[b:]

    def _step_masks(self, mask: "torch.Tensor", shared: int, dtype: "torch.dtype"
                    ) -> tuple["torch.Tensor", "cascade.Split | None"]:
        """A decode step's additive mask ``[B, 1, 1, T]`` in ``dtype`` and its
        ``cascade.hole_split`` (if it skips holes and the kernel, which skips them itself, does not
        run it): made once a pass, for every layer."""
        keep = cascade.additive(mask.bool()[:, None, None, :], dtype)
        return keep, cascade.hole_split(mask, shared) if self.skip_holes and self.kernel is None else None

    def _layers(self, hidden: "torch.Tensor", positions: "torch.Tensor",
                attend: Callable[[int, "torch.Tensor", "torch.Tensor", "torch.Tensor"], "torch.Tensor"]
                ) -> "torch.Tensor":
        """The decoder layers over ``hidden`` ``[b, s, hidden]``; ``attend(layer, q, k, v)``
        (``[b, heads, s, head_dim]``, rotated) stores k and v and returns ``[b, s, heads * head_dim]``."""
        import torch.nn.functional as F
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        model, (b, s) = self.model.model, hidden.shape[:2]
        cos, sin = model.rotary_emb(hidden, positions)
        delta = None  # the last block's output, added to hidden by the next norm
        small = self.kernel if self.kernel is not None and self.kernel.small_ops else None  # rotary, activation
        for i, layer in enumerate(model.layers):
            attn, mlp = layer.self_attn, layer.mlp
            normed, hidden = self._add_norm(hidden, delta, layer.input_layernorm)
            q, k, v = _project(normed, attn, [attn.q_proj, attn.k_proj, attn.v_proj])
            if small is not None:
                self._rotate(small, q, k, cos, sin)
            q = q.view(b, s, self.heads, self.head_dim).transpose(1, 2)
            k = k.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
            v = v.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
            if small is None:
                q, k = apply_rotary_pos_emb(q, k, cos, sin)
            delta = _project(attend(i, q, k, v), attn.o_proj, [attn.o_proj])[0]
            normed, hidden = self._add_norm(hidden, delta, layer.post_attention_layernorm)
            gate, up = _project(normed, mlp, [mlp.gate_proj, mlp.up_proj])
            act = F.silu(gate) * up if small is None else small.silu_mul(gate, up)
            delta = _project(act, mlp.down_proj, [mlp.down_proj])[0]
        return hidden if delta is None else hidden + delta

    def _add_norm(self, hidden: "torch.Tensor", delta: "torch.Tensor | None", norm: Any
                  ) -> tuple["torch.Tensor", "torch.Tensor"]:
        """``norm(hidden + delta)`` and ``hidden + delta`` (``hidden`` without ``delta``): one call
        of arft's kernel where it runs (``CpuKernels.rms_norm``), else the model's own norm."""
        kernel, weight = self.kernel, norm.weight
        if (kernel is not None and kernel.fits(hidden) and (delta is None or kernel.fits(delta))
                and weight.dtype == hidden.dtype and weight.shape == hidden.shape[-1:]):
            return kernel.rms_norm(hidden, weight, norm.variance_epsilon, delta)
        hidden = hidden if delta is None else hidden + delta
        return _norm(hidden, norm), hidden

    def _rotate(self, kernel: "CpuKernels", q: "torch.Tensor", k: "torch.Tensor", cos: "torch.Tensor",
                sin: "torch.Tensor") -> None:
        """Rotary embeddings of ``q`` and ``k`` ``[b, s, heads * head_dim]`` in place on arft's
        kernel: one call where k's heads follow q's in the rows of one product's output."""
        step = q.element_size()
        if k.data_ptr() == q.data_ptr() + q.shape[-1] * step and k.stride() == q.stride():
            kernel.rope_(q.as_strided((*q.shape[:-1], q.shape[-1] + k.shape[-1]), q.stride()),
                         self.heads + self.kv_heads, self.head_dim, cos, sin)
        else:
            kernel.rope_(q, self.heads, self.head_dim, cos, sin)
            kernel.rope_(k, self.kv_heads, self.head_dim, cos, sin)

    def _head(self, last: "torch.Tensor") -> "torch.Tensor":
        """Logits ``[B, V]`` of the last hidden states ``[B, hidden]``."""
        head = self.model.lm_head
        return _project(_norm(last, self.model.model.norm), head, [head])[0]


def supported(model: Any) -> bool:
    """Whether ``FusedPass`` reproduces ``model``'s forward (see the module doc): a
    ``LlamaForCausalLM``, or one under plain peft LoRA adapters (``lora_products.plain``)."""
    import torch
    from transformers import LlamaForCausalLM

    model = peft_layers.unwrap(model)
    if type(model) is not LlamaForCausalLM:
        return False
    config, weight = model.config, model.lm_head.weight
    if (config.hidden_act != "silu" or getattr(config, "pretraining_tp", 1) != 1 or weight.device.type != "cpu"
            or not packed_linear.supports(weight.dtype) or not cascade.has_cpu_flash()):
        return False
    linear = (torch.nn.Linear, packed_linear._packed_class())
    adapted = [m for layer in model.model.layers for m in layer.modules() if peft_layers.is_lora(m)]
    inside = {id(m) for layer in adapted for m in layer.modules() if m is not layer}
    modules = [m for layer in model.model.layers for m in layer.modules()
               if hasattr(m, "weight") and id(m) not in inside and not peft_layers.is_lora(m)]
    return all(type(m) in linear and m.bias is None for m in modules if m.weight.dim() == 2) \
        and all(lora_products.plain(m) for m in adapted) \
        and type(model.lm_head) in linear and model.lm_head.bias is None


def _project(x: "torch.Tensor", owner: Any, layers: list[Any]) -> list["torch.Tensor"]:
    """``x`` times each of ``layers``' weights: up to ``packed_linear.MAX_ROWS`` rows as one product
    with their stacked packed weights (kept under ``owner``), split; more rows (a long prefill),
    where ``F.linear`` is faster, one ``F.linear`` each. peft LoRA layers add their adapters'
    products (``lora_products``)."""
    import torch
    import torch.nn.functional as F

    adapted = any(peft_layers.is_lora(layer) for layer in layers)
    bases = [getattr(layer, "base_layer", layer) for layer in layers]
    if x.numel() > packed_linear.MAX_ROWS * x.shape[-1]:
        outs = [F.linear(x, base.weight) for base in bases]
        return [o + lora_products.unpacked_term(x, layer) for o, layer in zip(outs, layers)] if adapted else outs
    packed = packed_linear.packed(owner, [base.weight for base in bases])
    out = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    if adapted:
        out += lora_products.adapter_term(x, layers)
    return list(out.split([base.weight.shape[0] for base in bases], dim=-1)) if len(layers) > 1 else [out]


def _norm(x: "torch.Tensor", norm: Any) -> "torch.Tensor":
    """Hugging Face's ``LlamaRMSNorm``: one fused op in float32, the module itself otherwise."""
    import torch
    import torch.nn.functional as F

    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.variance_epsilon)
    return norm(x)
