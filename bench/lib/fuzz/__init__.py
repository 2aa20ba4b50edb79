"""The fuzz corpus and targets that the fuzz tests (``tests/fuzz``, a few hundred inputs each) and
the fuzz benchmark (``python -m bench run fuzz``, 10,000 each) share: valid examples of every
outside input, the strategies that mutate them, and the targets that run them through arft."""
