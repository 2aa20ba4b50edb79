"""Generation behind one protocol: token ids in, token ids and logprobs out.

The root holds what every engine shares: ``base`` (the protocols, the optional abilities as
``runtime_checkable`` protocols), ``factory`` (the one place an engine is built), ``grammar``
(xgrammar masks for constrained calls) and the small backends (``openai_engine``, ``scripted``).
Each big backend has its folder: ``transformers/``, ``vllm/``.
"""
