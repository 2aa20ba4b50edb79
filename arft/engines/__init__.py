"""arft.engines"""
