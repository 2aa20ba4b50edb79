"""arft.rollout"""
