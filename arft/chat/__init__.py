"""arft.chat"""
