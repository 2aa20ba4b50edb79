"""arft.sandbox"""
