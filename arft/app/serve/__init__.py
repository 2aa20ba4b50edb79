"""``arft serve``: the tuned agent behind an OpenAI-compatible chat-completions API.

``models`` loads what is served (a run's tuned agent beside its base, or a plain model),
``chat`` turns one chat-completions request into engine calls and back (tool calls, forced
``tool_choice``, ``parallel_tool_calls``, constrained calls, streaming), ``server`` is the FastAPI
app (auth, errors, server-sent events).
"""
