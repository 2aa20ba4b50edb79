"""Chat formats and tool calls, between records and token ids.

- ``formats``: render a conversation with a model's chat template (per template family), and the
  token-level pieces the rollout appends turn by turn (token in, token out);
- ``messages``: arft's ``Message`` records as the dicts a template or the Hermes format expects;
- ``tool_prompt``: how the tools are shown to a model whose template ignores them; ``tool_choice``;
- ``toolcalls``: parse the calls out of sampled text, and format calls and tool results;
- ``constraints``: the grammar of valid tool calls for a set of tool schemas (what constrained
  sampling masks with; the engines apply it).

Nothing here loads a model or samples: ``arft.models`` loads, ``arft.engines`` samples.
"""
