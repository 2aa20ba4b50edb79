"""arft.engines.transformers"""
