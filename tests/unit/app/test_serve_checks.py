"""``arft.app.serve.checks``: the context window read from the engine, the cheap bound that refuses
a huge prompt before tokenizing it, the reply budget beside a prompt, and constraint messages
rewritten for a server user."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from arft.app.serve.checks import (ChatRequestError, check_prompt_size, context_window, fit_context, for_server,
                                   longest_token)


def test_the_context_comes_from_the_model_config_or_the_vllm_server() -> None:
    hf = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=8192)))
    vllm = SimpleNamespace(server=SimpleNamespace(max_model_len=4096))
    assert (context_window(hf), context_window(vllm), context_window(object())) == (8192, 4096, None)


def test_words_or_characters_settle_a_huge_prompt_before_tokenizing(tokenizer: Any) -> None:
    chars = longest_token(tokenizer)
    assert 10 < chars < 200  # the embedded vocabulary's longest token (runs of spaces)
    with pytest.raises(ChatRequestError, match="at least 9,031 tokens .9,031 words"):
        check_prompt_size([{"role": "user", "content": "w " * 9031}], 8192, tokenizer)
    no_spaces = [{"role": "user", "content": [{"type": "text", "text": "x" * (8192 * chars + chars)}]}]
    with pytest.raises(ChatRequestError, match="at least 8,193 tokens"):
        check_prompt_size(no_spaces, 8192, tokenizer)
    check_prompt_size([{"role": "user", "content": "w " * 8000}], 8192, tokenizer)  # may fit: tokenized next
    check_prompt_size([{"role": "user", "content": "w " * 9031}], None, tokenizer)  # no known context: no check


def test_the_reply_budget_is_the_asked_one_or_the_default_clamped() -> None:
    assert fit_context(100, 8192, None, 1024) == 1024
    assert fit_context(8000, 8192, None, 1024) == 192  # the server's default, clamped to the room left
    assert fit_context(8000, 8192, 192, 1024) == 192
    with pytest.raises(ChatRequestError, match="asks for 193 more; this model's context is 8,192 tokens: ask "
                                               "for at most 192") as err:
        fit_context(8000, 8192, 193, 1024)
    assert err.value.param == "max_tokens"
    with pytest.raises(ChatRequestError, match="the prompt is 9,031 tokens; this model's context is 8,192"):
        fit_context(9031, 8192, None, 1024)
    assert fit_context(9031, None, None, 1024) == 1024


def test_constraint_messages_name_the_server_option_and_no_source_file() -> None:
    raw = ("tool 't': its parameters schema cannot be compiled for constrained decoding ([18:34:50] "
           "/project/cpp/json_schema_converter.cc:5082: Unsupported type \"strin\"); fix that part of the "
           "schema, or set rollout.constrained_tool_calls: false and remove \"strict\": true from the tool")
    assert for_server(raw) == ("tool 't': its parameters schema cannot be compiled for constrained decoding "
                               "(Unsupported type \"strin\"); fix that part of the schema, or start arft serve "
                               "with --no-constrain and remove \"strict\": true from the tool")
