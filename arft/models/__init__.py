"""arft.models"""
