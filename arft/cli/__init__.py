"""arft.cli"""
