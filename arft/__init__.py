"""arft — Agent Reinforcement Fine-Tuning you run yourself."""

__version__ = "0.1.0"
