"""arft.engines.vllm"""
