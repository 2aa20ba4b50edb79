"""arft's benchmarks, one harness: `python -m bench list` shows each and the claim it measures (see
``bench/__main__.py``); shared code is in ``bench/lib``, recorded results in ``bench/results``."""
