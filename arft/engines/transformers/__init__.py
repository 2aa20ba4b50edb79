"""The transformers engine (CPU or GPU, batched, constrained, streaming) and its internals.

- ``engine``: ``TransformersEngine``, its request queue, scheduler and step loop;
- ``snapshot``: the same over its own copy of the policy (async rollouts, LoRA merged in);
- ``decode_rows`` / ``sampling``: a row's decoding state, finish rules and sampling;
- ``kv_batch`` / ``prefill`` / ``prefix_cache``: the batch's KV layout, admissions and the
  store of prompts' prefixes;
- ``model_pass``: which forward runs a step (the model's own, or the fused pass);
- ``fused_pass`` / ``ragged``: arft's own decode steps and unpadded prefills for Llama-family
  models on the CPU (over ``arft.cpu``'s kernels).
"""
