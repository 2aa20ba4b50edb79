"""arft.graders"""
