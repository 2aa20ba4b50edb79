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

How tools are offered (schemas, ``tool_choice``, the Hermes tool block) lives in
``arft.chat.tool_prompt``; the messages each family hands to the template in
``arft.chat.messages``; the ``<tool_call>`` syntax itself in ``arft.chat.toolcalls``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from arft.chat.constraints import SchemaKeywords, ToolGrammar, drop_message, grammar_tools
from arft.chat.messages import hermes_messages, template_messages
from arft.chat.tool_prompt import (ChatFormatError, ToolChoice, normalize_tool,
                                     parse_tool_choice, tool_name)
from arft.chat.toolcalls import (
    END_OF_TURN_MARKERS,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    ParsedTurn,
    canonical_arguments,
    parse_tool_calls,
    strip_end_of_turn,
)
from arft.records import FunctionCall, Message, ToolCall

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

# Names used only in probe renderings; chosen so they cannot collide with real text.
PROBE_TOOL = "arft_probe_tool_5e0c"
PROBE_ARG = "arft_probe_arg"


@dataclass(frozen=True)
class Rendered:
    """Token ids to feed the engine; ``prefill``: text whose ids end ``ids``, not sampled."""

    ids: list[int]
    prefill: str
    text: str = ""
    """The rendered text (prefill included), for logs and viewers; never re-tokenized."""


def detect_family(tokenizer: "PreTrainedTokenizerBase") -> str:
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


def _probe_call(call_id: str = "call_probe0", name: str = PROBE_TOOL) -> ToolCall:
    return ToolCall(id=call_id, function=FunctionCall(name=name, arguments=f'{{"{PROBE_ARG}": 1}}'))


_PROBE_TOOLS: tuple[dict[str, object], ...] = (
    {"type": "function", "function": {"name": PROBE_TOOL, "description": "probe", "parameters": {"type": "object"}}},)
_PROBE_HEAD = (Message(role="user", content="Hi"),)


class ChatFormat:
    """Renders prompts, parses turns and builds continuation ids for one tokenizer.

    ``family``: ``auto`` detects it (see the module docstring); ``hermes`` forces arft's own
    format (for a template whose tool format arft cannot parse). ``worked_example`` adds an
    example call and its result to the ``hermes`` tool block; the ``template`` family keeps the
    template's own tool prompt (those models were trained on it) and ignores it.
    """

    def __init__(self, tokenizer: "PreTrainedTokenizerBase", worked_example: bool = True, family: str = "auto") -> None:
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
        # Schema keywords left out of a tool's grammar are warned about once per tool and run,
        # not once per rollout (a format serves a whole run).
        self._warned_drops: set[tuple[str, tuple[str, ...]]] = set()
        # Fails now, not mid-run, when the template cannot be extended by appending tokens.
        self._followup_text([Message(role="tool", content="probe", tool_call_id="call_probe0")])

    # ----------------------------------------------------------------- public API

    def render_text(self, messages: Sequence[Message], tools: Sequence[dict[str, object]] = (),
                    tool_choice: ToolChoice = "auto", add_generation_prompt: bool = False) -> str:
        """The whole conversation as text in this format (no prefill)."""
        listed = self._listed(tools, parse_tool_choice(tool_choice))
        if self.family == "hermes":
            return self._apply(hermes_messages(messages, listed, self.worked_example), None, add_generation_prompt)
        return self._apply(template_messages(messages), listed or None, add_generation_prompt)

    def render_prompt(self, messages: Sequence[Message], tools: Sequence[dict[str, object]],
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

    def turn_stops(self, stops: Sequence[str], parallel: bool) -> dict[str, tuple[str, ...]]:
        """The ``SamplingParams`` stop fields of one assistant turn: the caller's ``stops`` plus
        this format's call close, and (with ``parallel`` calls) the look-ahead that keeps a turn
        going when another call follows."""
        return {"stop": tuple(dict.fromkeys((*stops, *self.stop))),
                "stop_unless_followed_by": self.stop_unless_followed_by if parallel else ()}

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

    def turn_text(self, message: Message) -> str:
        """The text the model writes for an assistant ``message``: its content, then each call in
        this format's call syntax, up to the last call's close (where a sampled turn that made
        those calls stops). Renders demonstrations the way rollouts are sampled.

        Raises ``ChatFormatError`` for arguments that are not a JSON object.
        """
        parts = [message.content] if message.content else []
        for tc in message.tool_calls or ():
            try:
                args = json.loads(tc.function.arguments) if tc.function.arguments.strip() else {}
            except json.JSONDecodeError as e:
                raise ChatFormatError(f"call {tc.function.name!r}: its arguments are not JSON ({e})") from None
            if not isinstance(args, dict):
                raise ChatFormatError(f"call {tc.function.name!r}: its arguments are not a JSON object")
            name = json.dumps(tc.function.name, ensure_ascii=False)[1:-1]
            parts.append(self._call_open + name + self._args_infix + canonical_arguments(args) + self._call_end)
        return "\n".join(parts)

    def tool_grammar(self, tools: Sequence[dict[str, object]], constrain_all: bool,
                     keywords: SchemaKeywords = "strict") -> ToolGrammar | None:
        """The constraint on this format's tool calls for a row offering ``tools``, or None.

        ``constrain_all`` holds every tool to its schema; otherwise only ``"strict": true`` tools
        are (None when there is none). Raises ``ConstraintError`` for a schema keyword the
        constraint cannot enforce, unless ``keywords`` is ``lenient``: then it is left out of the
        grammar with one warning per tool (see ``arft.chat.constraints``).
        """
        listed = grammar_tools([normalize_tool(t) for t in tools], constrain_all, keywords,
                               self._warn_drop)
        if not listed:
            return None
        return ToolGrammar(tools=listed, trigger=TOOL_CALL_OPEN, call_begin=self._call_open,
                           args_infix=self._args_infix, call_end=self._call_end)

    def _warn_drop(self, tool: str, dropped: Sequence[str]) -> None:
        key = (tool, tuple(dropped))
        if key not in self._warned_drops:
            self._warned_drops.add(key)
            log.warning("%s", drop_message(tool, dropped))

    def encode(self, text: str) -> list[int]:
        """Token ids of rendered text (special-token markers in it become special tokens)."""
        if not text:
            return []
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    # ----------------------------------------------------------------- rendering

    def listed_tools(self, tools: Sequence[dict[str, object]], tool_choice: ToolChoice = "auto"
                     ) -> list[dict[str, Any]]:
        """The tool schemas the prompt lists under ``tool_choice`` (``none``: none; a named tool:
        only that one)."""
        return self._listed(tools, parse_tool_choice(tool_choice))

    def _listed(self, tools: Sequence[dict[str, object]], choice: tuple[str, str | None]
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

    def _apply(self, dicts: list[dict[str, object]], tools: list[dict[str, object]] | None,
               add_generation_prompt: bool) -> str:
        kwargs: dict[str, Any] = {"tools": tools} if tools else {}
        try:
            # transformers types the messages as str-valued dicts; an assistant's tool calls are not
            text = self.tokenizer.apply_chat_template(
                dicts, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs)  # type: ignore[arg-type]
        except Exception as e:  # noqa: BLE001 — templates raise jinja, Type, Value errors alike
            hint = "" if self.family == "hermes" else " or build ChatFormat(..., family='hermes')"
            raise ChatFormatError(
                f"the chat template could not render the conversation ({type(e).__name__}: {e}); "
                "check the message roles (some templates accept only alternating user/assistant "
                f"turns and no system message){hint}") from e
        return str(text)


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
