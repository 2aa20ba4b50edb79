"""arft's CPU fast path, one subsystem: the engines and the trainer call it; it calls neither.

- ``build``: compile ``csrc/*.cpp`` (one shared library per source, cached per machine);
  ``python -m arft.cpu build`` prebuilds them and says which ops are off and why;
- ``abi``: the C functions' argument lists, read from the one header ``csrc/arft_cpu.h`` and
  checked at each call; ``kernels`` / ``train_kernels``: the loaded libraries' Python face;
- ``ops/``: the update's fused ops, one file per op (forward, backward, dispatch);
- ``attention``: the one attention function registered with transformers, which dispatches
  between the engine's call (``cascade``: the shared prefix once, then arft's decode kernel),
  the trainer's call (``train_attention``) and PyTorch's ``sdpa``;
- ``patch``: the one module that changes transformers models (``install`` / ``uninstall``);
- ``packed_linear`` / ``lora_products``: weights packed for oneDNN and LoRA products for decode;
- ``threads`` / ``trainer_pass``: the CPU thread pools, and the flag marking the trainer's passes.

``docs/cpu.md`` describes the kernels, the build, the fallbacks and the environment variables.
"""
