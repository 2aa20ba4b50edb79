"""arft.trainer"""
