"""Chat rendering for token-in/token-out multi-turn rollouts.

The rollout keeps the exact token ids the engine sampled and builds turn n+1 by *appending*
ids: ``render_prompt`` gives turn 1's prompt, and after each turn ``continuation_ids`` gives the
ids that close the assistant turn, add the tool results and open the next assistant turn. The
concatenation is, token for token, a well-formed conversation in the model's chat format; sampled
text is never decoded and re-tokenized.

Two families:

* ``template`` — the tokenizer's own chat template renders ``tools=`` and writes tool calls as
  Hermes ``<tool_call>`` JSON blocks (Qwen2.5, Qwen3, Hermes models). arft passes the tools and
  the messages (OpenAI shape) to the template and lets it do everything.
* ``hermes`` — the template ignores ``tools=`` (SmolLM2 and most small chat models). arft writes
  its own Hermes/Qwen-style tool block (function schemas one per line inside ``<tools></tools>``,
  the ``<tool_call>`` format, optionally a worked example) into the system message, writes earlier
  tool calls as ``<tool_call>`` text in the assistant content, and writes tool results Qwen-style:
  consecutive results in *one user message*, each inside ``<tool_response>\\n...\\n
  </tool_response>``. The ``user`` role is chosen over a ``tool`` role because every chat
  template accepts it (many raise on unknown roles; SmolLM2 never saw ``tool``), and because it
  is exactly what Qwen-family models were trained on. The worked example shows the same layout.
  The resulting plain messages are then rendered by the tokenizer's template, so any template
  (ChatML, Llama, Gemma, ...) works.

Strings that depend on the template (the end of an assistant turn, the generation prompt, how
tool results are wrapped) are derived by rendering a probe conversation and taking the
difference, not hard-coded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from arft.models.constraints import ToolGrammar, grammar_tools
from arft.models.toolcalls import (
    END_OF_TURN_MARKERS,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    ParsedTurn,
    format_tool_call,
    format_tool_responses,
    parse_tool_calls,
    strip_end_of_turn,
)
from arft.records import FunctionCall, Message, ToolCall

ToolChoice = str | dict[str, Any] | None

# Names used only in probe renderings; chosen so they cannot collide with real text.
PROBE_TOOL = "arft_probe_tool_5e0c"
PROBE_ARG = "arft_probe_arg"

HERMES_TOOL_BLOCK = """# Tools

You may call one or more functions to help with the user's request.

The functions you can call are listed within <tools></tools> XML tags, one JSON schema per line:
<tools>
{schemas}
</tools>

To call a function, write a JSON object with the function's name and arguments within \
<tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>
You may write several <tool_call> blocks in one turn. The results come back in the next user \
message, one <tool_response></tool_response> block per call, in the same order. When you have \
what you need, answer the user without a tool call."""

WORKED_EXAMPLE = """# Example

The function {name} below only illustrates the format; it is not one of your functions.

user: What time is it in Paris and in Tokyo?
assistant:
{calls}
user:
{responses}
assistant: It is 09:30 in Paris and 16:30 in Tokyo."""


class ChatFormatError(ValueError):
    """A conversation, tool list or tool_choice the chat format cannot render; says what to do."""


@dataclass(frozen=True)
class Rendered:
    """Token ids to feed the engine; ``prefill``: text whose ids end ``ids``, not sampled."""

    ids: list[int]
    prefill: str
    text: str = ""
    """The rendered text (prefill included), for logs and viewers; never re-tokenized."""


def normalize_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A function schema in chat-completions shape ``{"type": "function", "function": {...}}``."""
    if tool.get("type") == "function" and isinstance(tool.get("function"), dict):
        return tool
    if isinstance(tool.get("name"), str):
        return {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}
    raise ChatFormatError(
        f"tool schema {json.dumps(tool)[:120]} has no function name: write it as "
        '{"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}'
    )


def tool_name(tool: dict[str, Any]) -> str:
    """The function name of a tool schema (either shape)."""
    return str(normalize_tool(tool)["function"]["name"])


def parse_tool_choice(tool_choice: ToolChoice) -> tuple[str, str | None]:
    """``(kind, name)`` with kind in auto | none | required | named (name set only for named)."""
    if tool_choice is None or tool_choice == "auto":
        return "auto", None
    if tool_choice in ("none", "required"):
        return str(tool_choice), None
    if isinstance(tool_choice, str) and tool_choice:
        return "named", tool_choice
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else tool_choice.get("name")
        if isinstance(name, str) and name:
            return "named", name
    raise ChatFormatError(
        f"tool_choice {tool_choice!r} is not understood: use auto, none, required, a tool name, "
        'or {"type": "function", "function": {"name": ...}}'
    )


def hermes_tool_block(tools: Sequence[dict[str, Any]], worked_example: bool = True) -> str:
    """The system-message text that lists ``tools`` and explains the ``<tool_call>`` format."""
    schemas = "\n".join(json.dumps(normalize_tool(t), ensure_ascii=False) for t in tools)
    block = HERMES_TOOL_BLOCK.format(schemas=schemas)
    if not worked_example:
        return block
    # A neutral tool that is not one of the task's, so the example never suggests real answers.
    taken = {tool_name(t) for t in tools}
    name = "get_time"
    while name in taken:
        name = "example_" + name
    calls = "\n".join(format_tool_call(name, {"city": c}) for c in ("Paris", "Tokyo"))
    responses = format_tool_responses(['{"city": "Paris", "time": "09:30"}',
                                       '{"city": "Tokyo", "time": "16:30"}'])
    return block + "\n\n" + WORKED_EXAMPLE.format(name=name, calls=calls, responses=responses)


def detect_family(tokenizer: Any) -> str:
    """``template`` if the tokenizer's chat template renders given ``tools``, else ``hermes``."""
    probe = {"type": "function", "function": {
        "name": PROBE_TOOL, "description": "probe",
        "parameters": {"type": "object", "properties": {PROBE_ARG: {"type": "integer"}}}}}
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tools=[probe],
                                             tokenize=False, add_generation_prompt=True)
    except Exception:  # noqa: BLE001 — a template that chokes on tools= cannot render them
        return "hermes"
    return "template" if PROBE_TOOL in str(text) else "hermes"


def _arguments_value(arguments: str) -> Any:
    """Arguments as a dict for templates (``tojson`` of a string would double-encode it)."""
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return arguments


def assistant_text(message: Message) -> str:
    """An assistant message's content with its tool calls written as ``<tool_call>`` blocks.

    Same layout as Qwen's template: the content, then each call on its own lines.
    """
    parts = [message.content] if message.content else []
    parts += [format_tool_call(tc.function.name, tc.function.arguments)
              for tc in message.tool_calls or ()]
    return "\n".join(parts)


def _probe_call(call_id: str = "call_probe0", name: str = PROBE_TOOL) -> ToolCall:
    return ToolCall(id=call_id, function=FunctionCall(name=name, arguments=f'{{"{PROBE_ARG}": 1}}'))


_PROBE_TOOLS = ({"type": "function", "function": {"name": PROBE_TOOL, "description": "probe",
                                                  "parameters": {"type": "object"}}},)
_PROBE_HEAD = (Message(role="user", content="Hi"),)


class ChatFormat:
    """Renders prompts, parses turns and builds continuation ids for one tokenizer.

    ``family``: ``auto`` detects it (see the module docstring); ``hermes`` forces arft's own
    format (for a template whose tool format arft cannot parse). ``worked_example`` adds an
    example call and its result to the ``hermes`` tool block; the ``template`` family keeps the
    template's own tool prompt (those models were trained on it) and ignores it.
    """

    def __init__(self, tokenizer: Any, worked_example: bool = True, family: str = "auto") -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ChatFormatError("the tokenizer has no chat template: use an instruct/chat model "
                                  "or set tokenizer.chat_template before building a ChatFormat")
        if family not in ("auto", "template", "hermes"):
            raise ChatFormatError(f"family {family!r} is unknown: use auto, template or hermes")
        self.tokenizer = tokenizer
        self.worked_example = worked_example
        self.family: str = detect_family(tokenizer) if family == "auto" else family
        self.stop: tuple[str, ...] = (TOOL_CALL_CLOSE,)
        """Stop strings for the engine: the model does not end its turn after a call by itself."""
        self.stop_unless_followed_by: tuple[str, ...] = (TOOL_CALL_OPEN,)
        """...unless another call follows at once: parallel calls stay in one turn."""
        self._end_markers = tuple(m for m in (tokenizer.eos_token, *END_OF_TURN_MARKERS) if m)
        self._call_open, self._args_infix, self._call_end, self._close = self._derive_call_syntax()
        self._close_after_eos = self._derive_close_after_eos()
        # Rendering through the jinja template dominates the loop's own cost: the k samples of a
        # task share one prompt, and tool results of the same shape share one skeleton.
        self._prompt_cache: dict[str, Rendered] = {}
        self._skeletons: dict[tuple[tuple[str, str | None], ...], list[str] | None] = {}
        # Fails now, not mid-run, when the template cannot be extended by appending tokens.
        self._followup_text([Message(role="tool", content="probe", tool_call_id="call_probe0")])

    # ----------------------------------------------------------------- public API

    def render_text(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = (),
                    tool_choice: ToolChoice = "auto", add_generation_prompt: bool = False) -> str:
        """The whole conversation as text in this format (no prefill)."""
        listed = self._listed(tools, parse_tool_choice(tool_choice))
        if self.family == "hermes":
            return self._apply(self._hermes_dicts(messages, listed), None, add_generation_prompt)
        return self._apply(self._template_dicts(messages), listed or None, add_generation_prompt)

    def render_prompt(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]],
                      tool_choice: ToolChoice = "auto") -> Rendered:
        """Turn 1's prompt ids: the conversation, the generation prompt and, when ``tool_choice``
        forces a call, the prefilled start of that call (its ids end ``ids``; not sampled).

        ``none`` lists no tools; a named tool lists only that tool.
        """
        key = json.dumps([[m.to_openai() for m in messages], list(tools), tool_choice], sort_keys=True)
        cached = self._prompt_cache.get(key)
        if cached is not None:
            return Rendered(list(cached.ids), cached.prefill, cached.text)
        choice = parse_tool_choice(tool_choice)
        text = self.render_text(messages, tools, tool_choice, add_generation_prompt=True)
        prefill = self._prefill(choice)
        rendered = Rendered(self.encode(text) + self.encode(prefill), prefill, text + prefill)
        if len(self._prompt_cache) >= 4096:  # bounded: drop the oldest entry
            self._prompt_cache.pop(next(iter(self._prompt_cache)))
        self._prompt_cache[key] = rendered
        return Rendered(list(rendered.ids), prefill, rendered.text)

    def parse(self, prefill: str, sampled_text: str, tool_choice: ToolChoice = "auto",
              allowed: set[str] | None = None) -> ParsedTurn:
        """The turn's content and calls from prefill + sampled text (``none``: all content)."""
        text = strip_end_of_turn(prefill + sampled_text, self._end_markers)
        if parse_tool_choice(tool_choice)[0] == "none":
            return ParsedTurn(content=text.strip() or None, tool_calls=[], errors=[])
        return parse_tool_calls(text, allowed)

    def continuation_ids(self, ended_with_eos: bool, tool_messages: Sequence[Message],
                         tool_choice_next: ToolChoice = "auto") -> Rendered:
        """Ids to append after a turn's sampled ids: close the assistant turn (only what follows
        eos when the sampled ids ended with it), the tool results (and any user messages), the
        generation prompt, and the prefill of a forced ``tool_choice_next``.
        """
        close = self._close_after_eos if ended_with_eos else self._close
        text = close + self._followup_text(tool_messages)
        prefill = self._prefill(parse_tool_choice(tool_choice_next))
        return Rendered(self.encode(text) + self.encode(prefill), prefill, text + prefill)

    def tool_grammar(self, tools: Sequence[dict[str, Any]], constrain_all: bool) -> ToolGrammar | None:
        """The constraint on this format's tool calls for a row offering ``tools``, or None.

        ``constrain_all`` holds every tool to its schema; otherwise only ``"strict": true`` tools
        are (None when there is none). Raises ``ConstraintError`` for a schema keyword the
        constraint cannot enforce (see ``arft.models.constraints``).
        """
        listed = grammar_tools([normalize_tool(t) for t in tools], constrain_all)
        if not listed:
            return None
        return ToolGrammar(tools=listed, trigger=TOOL_CALL_OPEN, call_begin=self._call_open,
                           args_infix=self._args_infix, call_end=self._call_end)

    def encode(self, text: str) -> list[int]:
        """Token ids of rendered text (special-token markers in it become special tokens)."""
        if not text:
            return []
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    # ----------------------------------------------------------------- rendering

    def _listed(self, tools: Sequence[dict[str, Any]], choice: tuple[str, str | None]
                ) -> list[dict[str, Any]]:
        """The tool schemas shown to the model under ``choice``."""
        kind, name = choice
        listed = [normalize_tool(t) for t in tools]
        if kind == "none":
            return []
        if kind == "required" and not listed:
            raise ChatFormatError("tool_choice 'required' needs at least one tool: give the task "
                                  "tools or use tool_choice 'auto'")
        if kind == "named":
            listed = [t for t in listed if t["function"]["name"] == name]
            if not listed:
                names = sorted(tool_name(t) for t in tools)
                raise ChatFormatError(f"tool_choice names tool {name!r} but the tools are {names}: "
                                      "name one of them, or use 'auto' or 'required'")
        return listed

    def _prefill(self, choice: tuple[str, str | None]) -> str:
        kind, name = choice
        if kind == "required":
            return self._call_open
        if kind == "named":
            # No trailing space: BPE tokenizers merge it with what follows (' {"'), so a prefill that
            # ends in a bare space leaves the model an unusual continuation and malformed arguments.
            return self._call_open + json.dumps(name, ensure_ascii=False)[1:-1] + self._args_infix.rstrip()
        return ""

    def _apply(self, dicts: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
               add_generation_prompt: bool) -> str:
        kwargs: dict[str, Any] = {"tools": tools} if tools else {}
        try:
            text = self.tokenizer.apply_chat_template(
                dicts, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs)
        except Exception as e:  # noqa: BLE001 — templates raise jinja, Type, Value errors alike
            hint = "" if self.family == "hermes" else " or build ChatFormat(..., family='hermes')"
            raise ChatFormatError(
                f"the chat template could not render the conversation ({type(e).__name__}: {e}); "
                "check the message roles (some templates accept only alternating user/assistant "
                f"turns and no system message){hint}") from e
        return str(text)

    def _hermes_dicts(self, messages: Sequence[Message], listed: list[dict[str, Any]]
                      ) -> list[dict[str, Any]]:
        """Plain role/content messages: calls as text, tool results as one user message."""
        dicts: list[dict[str, Any]] = []
        previous_was_tool = False
        for m in messages:
            if m.role == "tool":
                block = format_tool_responses([m.content or ""])
                if previous_was_tool:
                    dicts[-1]["content"] += "\n" + block
                else:
                    dicts.append({"role": "user", "content": block})
                previous_was_tool = True
                continue
            previous_was_tool = False
            role = "system" if m.role == "developer" else m.role
            content = assistant_text(m) if m.role == "assistant" else (m.content or "")
            dicts.append({"role": role, "content": content})
        if listed:
            # Our own system message also keeps templates from inserting their default one.
            block = hermes_tool_block(listed, self.worked_example)
            if dicts and dicts[0]["role"] == "system":
                system = dicts[0]["content"]
                merged = f"{system}\n\n{block}" if system else block
                dicts[0] = {"role": "system", "content": merged}
            else:
                dicts.insert(0, {"role": "system", "content": block})
        return dicts

    @staticmethod
    def _template_dicts(messages: Sequence[Message]) -> list[dict[str, Any]]:
        """OpenAI-shape messages for a tool-aware template (arguments as objects)."""
        dicts = []
        for m in messages:
            d: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role,
                                 "content": m.content or ""}
            if m.tool_calls:
                d["tool_calls"] = [{"id": tc.id, "type": "function", "function": {
                    "name": tc.function.name, "arguments": _arguments_value(tc.function.arguments)}}
                    for tc in m.tool_calls]
            if m.tool_call_id:
                d["tool_call_id"] = m.tool_call_id
            if m.name:
                d["name"] = m.name
            dicts.append(d)
        return dicts

    # ----------------------------------------------------------------- probes

    def _derive_call_syntax(self) -> tuple[str, str, str, str]:
        """From a probe call rendered in this format: how a call starts (up to the name), what
        sits between the name and the arguments, what follows the arguments up to and including
        ``</tool_call>``, and what closes the turn after the last ``</tool_call>``."""
        probe = Message(role="assistant", tool_calls=(_probe_call(),))
        text = self.render_text([*_PROBE_HEAD, probe], _PROBE_TOOLS)
        start = text.rfind(TOOL_CALL_OPEN)
        seg = text[start:] if start >= 0 else ""
        n, a, end = seg.find(PROBE_TOOL), seg.find('{"' + PROBE_ARG), seg.rfind(TOOL_CALL_CLOSE)
        if start < 0 or n < 0 or a < n or end < a:
            raise ChatFormatError(
                "this chat template renders tools but does not write calls as "
                f'{TOOL_CALL_OPEN}{{"name": ..., "arguments": ...}}{TOOL_CALL_CLOSE} blocks, which '
                "arft parses: build ChatFormat(tokenizer, family='hermes') to use arft's format")
        args_end = json.JSONDecoder().raw_decode(seg, a)[1]
        close = end + len(TOOL_CALL_CLOSE)
        return seg[:n], seg[n + len(PROBE_TOOL):a], seg[args_end:close], seg[close:]

    def _derive_close_after_eos(self) -> str:
        """What is still missing from the turn's close when the sampled ids ended with eos.

        The first end-of-turn marker in the close is the one the model sampled (ChatML: only
        the "\n" after ``<|im_end|>`` is left). The tokenizer's eos is tried first; the common
        markers cover tokenizers whose ``eos_token`` is not the end-of-turn token.
        """
        for marker in self._end_markers:
            i = self._close.find(marker)
            if i >= 0:
                return self._close[i + len(marker):]
        return self._close

    def _followup_text(self, messages: Sequence[Message]) -> str:
        """``_render_followup`` through a cached skeleton: the followup of messages of the same
        roles and names, rendered once with placeholder contents that are then filled in. Used
        only when every placeholder appears exactly once (else the template touched the content
        and every call renders for real)."""
        key = tuple((m.role, m.name) for m in messages)
        if key not in self._skeletons:
            marks = [f"\x00ARFT{i}\x00" for i in range(len(messages))]
            probe = [m.model_copy(update={"content": mark}) for m, mark in zip(messages, marks)]
            text = self._render_followup(probe)
            pieces: list[str] | None = []
            for mark in marks:
                head, sep, text = text.partition(mark)
                if not sep or mark in text or pieces is None:
                    pieces = None
                    break
                pieces.append(head)
            self._skeletons[key] = None if pieces is None else [*pieces, text]
        skeleton = self._skeletons[key]
        if skeleton is None or any(m.content and "\x00ARFT" in m.content for m in messages):
            return self._render_followup(messages)
        out = [skeleton[0]]
        for m, piece in zip(messages, skeleton[1:]):
            out += [m.content or "", piece]
        return "".join(out)

    def _render_followup(self, messages: Sequence[Message]) -> str:
        """The text a closed assistant turn is followed by: ``messages`` + the generation prompt.

        Rendered after a probe assistant turn that made one call per tool message, as the
        difference between the conversation with and without ``messages``.
        """
        if any(m.role == "assistant" for m in messages):
            raise ChatFormatError("continuation_ids appends tool results (and user messages), not "
                                  "assistant turns: pass the assistant's turn as sampled ids")
        tool_msgs = [m for m in messages if m.role == "tool"]
        calls = tuple(_probe_call(m.tool_call_id or f"call_probe{i}", m.name or PROBE_TOOL)
                      for i, m in enumerate(tool_msgs)) or (_probe_call(),)
        head = [*_PROBE_HEAD, Message(role="assistant", tool_calls=calls)]
        before = self.render_text(head, _PROBE_TOOLS)
        after = self.render_text([*head, *messages], _PROBE_TOOLS, add_generation_prompt=True)
        if not after.startswith(before):
            raise ChatFormatError(
                "the chat template re-renders earlier turns when messages are appended, so turns "
                "cannot be built by appending tokens: build ChatFormat(tokenizer, family='hermes')")
        return after[len(before):]
