"""arft.cpu"""
