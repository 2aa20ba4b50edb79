"""arft.tools"""
