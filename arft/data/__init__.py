"""arft.data"""
