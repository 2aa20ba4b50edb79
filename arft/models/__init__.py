"""Model loading (a Hugging Face id, a local folder, a GGUF file, the embedded default), the LoRA
layers, what arft reads off a loaded model (``hf_model``) and token-id helpers. Chat formats and
tool-call parsing are in ``arft.chat``; the CPU fast paths in ``arft.cpu``."""
