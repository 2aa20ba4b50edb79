"""arft.tracing"""
