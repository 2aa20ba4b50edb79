"""arft.report"""
