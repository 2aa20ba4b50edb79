"""Chat rendering, forced tool_choice prefills, and the token-in/token-out prefix property."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from arft.chat.formats import ChatFormat, Rendered, detect_family
from arft.chat.tool_prompt import ChatFormatError, hermes_tool_block, normalize_tool
from arft.chat.toolcalls import format_tool_call
from arft.records import FunctionCall, Message, ToolCall

# Qwen2.5-Instruct's chat template (public tokenizer_config.json), as a tool-aware template.
QWEN25_TEMPLATE = (
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query."
    "\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": "
    "<function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. "
    "You are a helpful assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
    "(message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n"
)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
# The bare shape (no "type"/"function" wrapper) is accepted too.
SEARCH = {"name": "search_docs", "description": "Search the docs.",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
TOOLS = [WEATHER, SEARCH]
PROMPT = (Message(role="system", content="Answer briefly."),
          Message(role="user", content="Weather in Paris, Tokyo and Oslo?"))


def call(name: str, args: dict[str, Any], call_id: str) -> ToolCall:
    return ToolCall(id=call_id, function=FunctionCall(name=name, arguments=json.dumps(args)))


@pytest.fixture(scope="module")
def qwen_tok(tokenizer: Any) -> Any:
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = QWEN25_TEMPLATE
    return tok


@pytest.fixture(scope="module")
def hermes(tokenizer: Any) -> ChatFormat:
    return ChatFormat(tokenizer)


def openai_dicts(conv: list[Message]) -> list[dict[str, Any]]:
    """Messages as HF templates take them: arguments as objects (written here, not by arft)."""
    out = []
    for m in conv:
        d = m.to_openai()
        for tc in d.get("tool_calls", []):
            tc["function"]["arguments"] = json.loads(tc["function"]["arguments"])
        out.append(d)
    return out


def decode(tok: Any, ids: list[int]) -> str:
    return tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


# ------------------------------------------------------------------ family detection

def test_family_detection(tokenizer: Any, qwen_tok: Any) -> None:
    assert detect_family(tokenizer) == "hermes"  # SmolLM2 ignores tools=
    assert ChatFormat(tokenizer).family == "hermes"
    assert ChatFormat(qwen_tok).family == "template"
    assert ChatFormat(qwen_tok, family="hermes").family == "hermes"
    assert ChatFormat(tokenizer).stop == ("</tool_call>",)


def test_unusable_templates_fail_with_advice(tokenizer: Any) -> None:
    bare = copy.deepcopy(tokenizer)
    bare.chat_template = None
    with pytest.raises(ChatFormatError, match="no chat template"):
        ChatFormat(bare)
    # Renders tools, but writes calls as bare JSON (Llama-3.1 style): arft cannot parse them.
    llama_like = copy.deepcopy(tokenizer)
    llama_like.chat_template = (
        "{% if tools %}TOOLS {{ tools | tojson }}\n{% endif %}{% for m in messages %}"
        "<|im_start|>{{ m.role }}\n{% if m.tool_calls %}{% for c in m.tool_calls %}"
        "{\"name\": \"{{ c.function.name }}\", \"parameters\": {{ c.function.arguments | tojson }}}"
        "{% endfor %}{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    with pytest.raises(ChatFormatError, match="family='hermes'"):
        ChatFormat(llama_like)
    assert ChatFormat(llama_like, family="hermes").family == "hermes"
    # Re-renders earlier text when messages are appended: appending tokens cannot work.
    unstable = copy.deepcopy(tokenizer)
    unstable.chat_template = "{{ messages | length }}" + tokenizer.chat_template
    with pytest.raises(ChatFormatError, match="re-renders earlier turns"):
        ChatFormat(unstable)


# ------------------------------------------------------------------ hermes rendering

def test_hermes_tool_block_lists_schemas_and_merges_into_system(hermes: ChatFormat,
                                                                 tokenizer: Any) -> None:
    r = hermes.render_prompt(PROMPT, TOOLS)
    assert r.prefill == ""
    assert decode(tokenizer, r.ids) == r.text
    schemas = [json.dumps(WEATHER), json.dumps({"type": "function", "function": SEARCH})]
    assert "<tools>\n" + "\n".join(schemas) + "\n</tools>" in r.text
    assert r.text.count("<|im_start|>system") == 1
    assert r.text.startswith("<|im_start|>system\nAnswer briefly.\n\n# Tools\n")
    assert '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' \
        in r.text
    assert r.text.endswith("<|im_start|>user\nWeather in Paris, Tokyo and Oslo?<|im_end|>\n"
                           "<|im_start|>assistant\n")
    assert "SmolLM" not in r.text


def test_hermes_without_system_message_has_no_smollm_default(hermes: ChatFormat) -> None:
    text = hermes.render_prompt(PROMPT[1:], TOOLS).text
    assert text.startswith("<|im_start|>system\n# Tools\n")
    assert "SmolLM" not in text


def test_worked_example_shows_parallel_calls_and_results_as_rendered_later(
        hermes: ChatFormat, tokenizer: Any) -> None:
    text = hermes.render_prompt(PROMPT, TOOLS).text
    example = ('<tool_call>\n{"name": "get_time", "arguments": {"city": "Paris"}}\n</tool_call>\n'
               '<tool_call>\n{"name": "get_time", "arguments": {"city": "Tokyo"}}\n</tool_call>')
    assert example in text
    # Results in the example use the same layout as real tool results later in the rollout.
    real = hermes.continuation_ids(False, [Message(role="tool", content="A", tool_call_id="1"),
                                           Message(role="tool", content="B", tool_call_id="2")]).text
    assert "<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n</tool_response>" in real
    assert ('<tool_response>\n{"city": "Paris", "time": "09:30"}\n</tool_response>\n'
            '<tool_response>\n{"city": "Tokyo", "time": "16:30"}\n</tool_response>') in text
    assert "get_time" not in ChatFormat(tokenizer, worked_example=False).render_prompt(
        PROMPT, TOOLS).text
    # The example tool never collides with a task tool.
    own = {"type": "function", "function": {"name": "get_time", "parameters": {}}}
    assert '"name": "example_get_time"' in hermes_tool_block([own])


def test_tool_choice_none_lists_no_tools(hermes: ChatFormat) -> None:
    r = hermes.render_prompt(PROMPT, TOOLS, tool_choice="none")
    assert "<tools>" not in r.text and "<tool_call>" not in r.text
    assert r.prefill == ""


def test_tool_choice_required_prefills_a_call(hermes: ChatFormat, tokenizer: Any) -> None:
    r = hermes.render_prompt(PROMPT, TOOLS, tool_choice="required")
    assert r.prefill == '<tool_call>\n{"name": "'
    assert r.text.endswith('<|im_start|>assistant\n<tool_call>\n{"name": "')
    prefill_ids = hermes.encode(r.prefill)
    assert r.ids[-len(prefill_ids):] == prefill_ids
    assert decode(tokenizer, r.ids) == r.text
    assert "search_docs" in r.text and "get_weather" in r.text


@pytest.mark.parametrize("choice", ["search_docs",
                                    {"type": "function", "function": {"name": "search_docs"}}])
def test_named_tool_choice_prefills_the_name_and_lists_only_it(hermes: ChatFormat,
                                                               choice: Any) -> None:
    r = hermes.render_prompt(PROMPT, TOOLS, tool_choice=choice)
    assert r.prefill == '<tool_call>\n{"name": "search_docs", "arguments":'
    assert r.prefill == r.prefill.rstrip()  # the space belongs to the model's ' {"' token
    assert r.ids[-len(hermes.encode(r.prefill)):] == hermes.encode(r.prefill)
    assert "search_docs" in r.text and "get_weather" not in r.text


def test_bad_tool_choices_say_what_to_do(hermes: ChatFormat) -> None:
    with pytest.raises(ChatFormatError, match="name one of them"):
        hermes.render_prompt(PROMPT, TOOLS, tool_choice="nope")
    with pytest.raises(ChatFormatError, match="needs at least one tool"):
        hermes.render_prompt(PROMPT, [], tool_choice="required")
    with pytest.raises(ChatFormatError, match="not understood"):
        hermes.render_prompt(PROMPT, TOOLS, tool_choice={"type": "function"})
    with pytest.raises(ChatFormatError, match="no function name"):
        hermes.render_prompt(PROMPT, [{"description": "x"}])


def test_hermes_renders_earlier_calls_and_results(hermes: ChatFormat) -> None:
    few_shot = [*PROMPT,
                Message(role="assistant", content="Checking.", tool_calls=(
                    call("get_weather", {"city": "Paris"}, "c1"),
                    call("get_weather", {"city": "Tokyo"}, "c2"))),
                Message(role="tool", content="sunny", tool_call_id="c1"),
                Message(role="tool", content="rain", tool_call_id="c2"),
                Message(role="assistant", content="Paris sunny, Tokyo rain."),
                Message(role="user", content="And Oslo?")]
    text = hermes.render_prompt(few_shot, TOOLS).text
    assert ('<|im_start|>assistant\nChecking.\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"city": "Tokyo"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n'
            '</tool_response>\n<tool_response>\nrain\n</tool_response><|im_end|>\n'
            '<|im_start|>assistant\nParis sunny, Tokyo rain.<|im_end|>\n') in text
    assert "<|im_start|>tool" not in text


def test_continuation_strings_for_chatml(hermes: ChatFormat) -> None:
    result = [Message(role="tool", content="sunny", tool_call_id="c1")]
    after_stop = hermes.continuation_ids(False, result)
    assert after_stop.text == ("<|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n"
                               "</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert after_stop.ids[0] == hermes.tokenizer.eos_token_id
    after_eos = hermes.continuation_ids(True, result, tool_choice_next="required")
    assert after_eos.text.startswith("\n<|im_start|>user\n")
    assert after_eos.text.endswith('<|im_start|>assistant\n<tool_call>\n{"name": "')
    assert after_eos.prefill == '<tool_call>\n{"name": "'
    with pytest.raises(ChatFormatError, match="not assistant turns"):
        hermes.continuation_ids(False, [Message(role="assistant", content="x")])


def test_parse_uses_prefill_and_respects_none(hermes: ChatFormat) -> None:
    turn = hermes.parse('<tool_call>\n{"name": "', 'get_weather", "arguments": {"city": "Oslo"}}\n'
                        "</tool_call>", "required")
    assert turn.errors == [] and turn.tool_calls[0].function.name == "get_weather"
    turn = hermes.parse("", "I will not call.\n" + format_tool_call("x", {}) + "<|im_end|>", "none")
    assert turn.tool_calls == [] and turn.errors == []
    assert turn.content == 'I will not call.\n<tool_call>\n{"name": "x", "arguments": {}}\n</tool_call>'
    assert hermes.parse("", "Plain answer.<|im_end|>").content == "Plain answer."


# ------------------------------------------------------------------ template family rendering

def test_template_family_uses_the_templates_tool_prompt(qwen_tok: Any) -> None:
    fmt = ChatFormat(qwen_tok)
    r = fmt.render_prompt(PROMPT, TOOLS)
    assert "Answer briefly.\n\n# Tools\n\nYou may call one or more functions to assist" in r.text
    assert json.dumps(WEATHER) in r.text
    assert "get_time" not in r.text  # the template's own prompt, no worked example added
    assert decode(qwen_tok, r.ids) == r.text
    named = fmt.render_prompt(PROMPT, TOOLS, tool_choice="get_weather")
    assert named.prefill == '<tool_call>\n{"name": "get_weather", "arguments":'
    assert "search_docs" not in named.text
    assert "# Tools" not in fmt.render_prompt(PROMPT, TOOLS, tool_choice="none").text


# ------------------------------------------------------------------ the prefix property

def _rollout(fmt: ChatFormat, first_choice: str) -> None:
    """Simulate 3 turns by appending ids; after every step the ids must decode to the whole
    conversation rendered at once, and earlier ids must be an exact prefix of later ones."""
    tok = fmt.tokenizer
    eos = tok.eos_token

    def reference(conv: list[Message], gen: bool) -> str:
        if fmt.family == "template":  # independent of arft: the template itself
            listed = [normalize_tool(t) for t in TOOLS if first_choice == "auto"
                      or normalize_tool(t)["function"]["name"] == first_choice]
            return tok.apply_chat_template(openai_dicts(conv), tools=listed,
                                           tokenize=False, add_generation_prompt=gen)
        return fmt.render_text(conv, TOOLS, first_choice, add_generation_prompt=gen)

    conv = list(PROMPT)
    prompt = fmt.render_prompt(conv, TOOLS, tool_choice=first_choice)
    ids, snapshots = list(prompt.ids), [list(prompt.ids)]
    assert decode(tok, ids) == reference(conv, True) + prompt.prefill

    # Turn 1: one call, stopped on "</tool_call>" (no eos); part of it may be prefilled.
    a1 = Message(role="assistant", tool_calls=(call("get_weather", {"city": "Paris"}, "c1"),))
    sampled = format_tool_call("get_weather", {"city": "Paris"})
    assert sampled.startswith(prompt.prefill)
    ids += fmt.encode(sampled[len(prompt.prefill):])
    results1 = [Message(role="tool", content='{"temp": 21, "sky": "sunny"}', tool_call_id="c1")]
    ids += fmt.continuation_ids(False, results1).ids
    conv += [a1, *results1]
    assert decode(tok, ids) == reference(conv, True)
    snapshots.append(list(ids))

    # Turn 2: text + two parallel calls, then the model ended its turn with eos itself.
    a2 = Message(role="assistant", content="Now the other two.", tool_calls=(
        call("get_weather", {"city": "Tokyo"}, "c2"), call("get_weather", {"city": "Oslo"}, "c3")))
    turn2 = "Now the other two.\n" + "\n".join(
        format_tool_call("get_weather", {"city": c}) for c in ("Tokyo", "Oslo"))
    ids += fmt.encode(turn2 + eos)
    assert fmt.parse("", turn2 + eos).tool_calls[1].function.arguments == '{"city": "Oslo"}'
    results2 = [Message(role="tool", content="rain", tool_call_id="c2"),
                Message(role="tool", content="snow", tool_call_id="c3")]
    ids += fmt.continuation_ids(True, results2).ids
    conv += [a2, *results2]
    assert decode(tok, ids) == reference(conv, True)
    snapshots.append(list(ids))

    # Turn 3: the final answer, ended with eos.
    ids += fmt.encode("Paris 21 and sunny, Tokyo rain, Oslo snow." + eos)
    conv.append(Message(role="assistant", content="Paris 21 and sunny, Tokyo rain, Oslo snow."))
    full = reference(conv, False)
    text = decode(tok, ids)
    assert full.startswith(text) and full[len(text):].strip() == ""  # only the template's "\n"
    for earlier, later in zip(snapshots, snapshots[1:] + [ids]):
        assert later[:len(earlier)] == earlier


@pytest.mark.parametrize("first_choice", ["auto", "get_weather"])
@pytest.mark.parametrize("variant", ["smollm-hermes", "qwen-template", "qwen-forced-hermes"])
def test_prefix_property_across_three_turns(tokenizer: Any, qwen_tok: Any, variant: str,
                                            first_choice: str) -> None:
    fmt = {"smollm-hermes": lambda: ChatFormat(tokenizer),
           "qwen-template": lambda: ChatFormat(qwen_tok),
           "qwen-forced-hermes": lambda: ChatFormat(qwen_tok, family="hermes")}[variant]()
    assert fmt.family == ("template" if variant == "qwen-template" else "hermes")
    _rollout(fmt, first_choice)


def test_rendered_is_a_plain_record() -> None:
    r = Rendered(ids=[1, 2], prefill="")
    assert (r.ids, r.prefill, r.text) == ([1, 2], "", "")


def test_cached_followup_skeleton_equals_a_real_render(tokenizer: Any) -> None:
    """The skeleton cache must give exactly what rendering through the template gives."""
    fmt = ChatFormat(tokenizer)
    for contents in (["a"], ["x {{ y }} <|im_end|>", "", "multi\nline\n"], ["é ü 中文"]):
        msgs = [Message(role="tool", content=c, tool_call_id=f"call_{i}") for i, c in enumerate(contents)]
        assert fmt._followup_text(msgs) == fmt._render_followup(msgs)
        assert fmt._followup_text(msgs) == fmt._render_followup(msgs)  # second call: from the cache


def test_prompt_cache_returns_independent_copies(tokenizer: Any) -> None:
    fmt = ChatFormat(tokenizer)
    msgs = [Message(role="user", content="hi")]
    a = fmt.render_prompt(msgs, [])
    a.ids.append(-1)
    assert fmt.render_prompt(msgs, []).ids[-1] != -1
