"""The fuzz inputs of each target, as Hypothesis strategies: mostly near-valid examples
(``bench.lib.fuzz.examples`` mutated by ``bench.lib.fuzz.strategies``), serialised the way the real input
arrives (a JSONL file, a YAML or JSON job file, model text, an HTTP answer), plus plain junk and
pathologically deep JSON. Every strategy is built once, here (see ``bench.lib.fuzz.strategies``)."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import strategies as st

from bench.lib.fuzz import examples as ex
from bench.lib.fuzz.strategies import (DEEP, JSON_VALUES, KINDS, NASTY_STRINGS, SMALL_JSON_VALUES,
                                   corrupt_bytes, corrupt_text, deep_json, encoded, json_text,
                                   near_valid)

LINE_KINDS = st.sampled_from(("valid", "valid", "valid", "valid", "junk", "text", "deep"))
ONE_IN_FOUR = st.integers(0, 3)
SEPARATORS = st.sampled_from(("\n", "\n", "\n\n", "\n \n"))
ENDINGS = st.sampled_from(("\n", "", "\n\n"))


def _json_or_deep(value: Any, ensure_ascii: bool = False) -> str:
    try:
        return json_text(value, ensure_ascii)
    except RecursionError:  # mutations nested it past the encoder's stack: write it deep by hand
        return deep_json(1_000)


def _line(draw: st.DrawFn, valid: st.SearchStrategy[Any]) -> str:
    """One JSONL line: a near-valid record (sometimes with its text corrupted), junk or deep."""
    kind = draw(LINE_KINDS)
    if kind == "junk":
        return json_text(draw(JSON_VALUES))
    if kind == "text":
        return draw(st.text(max_size=60)).replace("\n", " ")
    if kind == "deep":
        return '{"messages": ' + deep_json(draw(DEEP), kind=draw(KINDS)) + "}"
    text = _json_or_deep(draw(valid), draw(st.booleans()))
    if draw(ONE_IN_FOUR) == 0:
        text = corrupt_text(draw, text)
    return text.replace("\n", "\\n")


@st.composite
def jsonl_file(draw: st.DrawFn, valid: st.SearchStrategy[Any]) -> bytes:
    """A JSONL file of 1..4 lines of near-valid ``valid`` records (and others), as bytes."""
    lines = [_line(draw, valid) for _ in range(draw(st.integers(1, 4)))]
    text = draw(SEPARATORS).join(lines) + draw(ENDINGS)
    return corrupt_bytes(draw, encoded(text))


DATASET_FILE = jsonl_file(near_valid(ex.DATASET_ROW))
"""A dataset (``load_tasks``): rows in the hosted format."""
TRAFFIC_FILE = jsonl_file(near_valid(ex.TRAFFIC_LINE))
"""An ``arft import`` log: logged calls, bare requests and fine-tuning rows."""
ITEM_PATHS = st.one_of(
    st.sampled_from(((), ("expected=metadata.expected",), ("first=messages.0.content",),
                     ("q=request.messages.0.content", "a=answer"))),
    st.lists(st.sampled_from(("id=x", "messages=a", "=x", "x=", "x", "x=a..b", "x=.", " y = a.0 ",
                              "x=" + "a." * 500 + "a", "\ud800=a", "x=messages.²", "x=messages.١",
                              "x=messages." + "9" * 5_000)), max_size=2).map(tuple))
"""``--item KEY=PATH`` options: valid ones mostly; a bad one is a ValueError saying so."""
REDACT = st.one_of(
    st.sampled_from(((), ("pii",), (r"\d{3,}",))),
    st.lists(st.sampled_from(("pii", "(", "[a-", "a*", "x?", "(?i)secret", "\\", "", r"\bkey\b",
                              "(?P<n>a)(?P<n>b)", "x{2,1}")), max_size=2).map(tuple))
"""``--redact`` patterns (the user's own regexes are trusted not to be catastrophic)."""
IMPORT_OPTIONS = st.fixed_dictionaries({
    "item_paths": ITEM_PATHS, "item_optional": st.booleans(), "redact": REDACT,
    "with_job": st.booleans(),
})


# -- job files ---------------------------------------------------------------------------------

YAML_SNIPPETS = st.sampled_from((
    "method: [unclosed", "\tmodel: x", "a: &a [1, 2]\nb: *a", "!!python/object/apply:os.system ['true']",
    "? [complex, key]\n: value", "---\nmodel: a\n---\nmodel: b\n", "{model: a, model: b}",
    "model: 2001-01-01", "seed: 0x1F", "seed: 1_000", "model: !!binary aGVsbG8=", "- a\n- b",
    "null", "~", "''", "method:\n  type: reinforcement\n  reinforcement: *missing",
    "method: {type: reinforcement, reinforcement: {grader: {type: multi, graders: {}}}}",
    "%YAML 1.1\n---\nmodel: x", "model: \"\\ud800\"", "1: one\n2: two", "[1, {2: 3}]: x",
))
JOB_KINDS = st.sampled_from(("yaml", "yaml", "yaml", "yaml", "yaml", "json", "json", "snippet",
                             "junk", "deep"))
SUFFIXES = st.sampled_from((".yaml", ".json"))
FLOW_STYLES = st.sampled_from((False, None, True))
ONE_IN_FIVE = st.integers(0, 4)
JOB_SPECS = near_valid(ex.JOB_SPEC)
JOB_DEEP = st.sampled_from((700, 1_000, 3_000, 100_000))
"""A few depths only: PyYAML takes seconds on each (``targets`` remembers their outcomes)."""


def _yaml_text(draw: st.DrawFn, spec: Any) -> str:
    try:
        return yaml.safe_dump(spec, allow_unicode=draw(st.booleans()), sort_keys=False,
                              default_flow_style=draw(FLOW_STYLES))
    except (RecursionError, yaml.YAMLError):
        return json_text(spec)  # JSON is YAML too


@st.composite
def job_file(draw: st.DrawFn) -> tuple[str, bytes]:
    """``(suffix, content)`` of a job file: near-valid YAML or JSON, YAML oddities, deep."""
    kind = draw(JOB_KINDS)
    if kind == "snippet":
        return ".yaml", encoded(draw(YAML_SNIPPETS))
    if kind == "deep":
        return draw(SUFFIXES), encoded('{"method": ' + deep_json(draw(JOB_DEEP), kind=draw(KINDS)) + "}")
    if kind == "junk":
        return draw(SUFFIXES), encoded(json_text(draw(JSON_VALUES)))
    spec = draw(JOB_SPECS)
    text = _yaml_text(draw, spec) if kind == "yaml" else _json_or_deep(spec, draw(st.booleans()))
    if draw(ONE_IN_FIVE) == 0:
        text = corrupt_text(draw, text)
    return (".json" if kind == "json" else ".yaml"), corrupt_bytes(draw, encoded(text))


JOB_FILE = job_file()
GRADER_SPECS = near_valid(ex.GRADER_SPEC)
BROKEN_PYTHON = ex.obj(type=st.just("python"), name=ex.maybe(st.just("g")), source=ex.BROKEN_SOURCE)
"""A python grader whose code is wrong: a syntax error, no or a bad ``grade``, too deep to compile."""
GRADER_SPEC = st.one_of(GRADER_SPECS, GRADER_SPECS, GRADER_SPECS, BROKEN_PYTHON, JSON_VALUES)
"""A grader spec as a job or ``--grader G.json`` gives it: mostly near-valid, some junk."""


# -- model text --------------------------------------------------------------------------------

CALL_OBJECTS = near_valid(ex.CALL_OBJECT)
LAYOUTS = st.sampled_from(("\n{}\n", "{}", " {} ", "\n{}}}\n", "\n{}"))
TAGS = st.sampled_from((("<tool_call>", "</tool_call>"), ("<tool_call>", ""),
                        ("<tool_call><tool_call>", "</tool_call>"), ("", "</tool_call>"),
                        ("<tool_call>", "</tool_call></tool_call>")))
TURN_KINDS = st.sampled_from(("blocks", "blocks", "blocks", "bare", "text", "deep"))
TURN_TEXT = st.one_of(st.text(), st.sampled_from(NASTY_STRINGS))
PREFIXES = st.sampled_from(("", "Let me check.", "I'll call the tool:\n", "🙂"))
SUFFIXES_TURN = st.sampled_from(("", "<|im_end|>", "</s>\n", " done", "<|eot_id|><|im_end|>"))
JOINS = st.sampled_from(("", "\n"))
ALLOWED = st.one_of(st.none(), st.frozensets(st.sampled_from(ex.TOOL_NAMES)))


def _block(draw: st.DrawFn) -> str:
    body = _json_or_deep(draw(CALL_OBJECTS), draw(st.booleans()))
    if draw(ONE_IN_FOUR) == 0:
        body = corrupt_text(draw, body)
    open_, close = draw(TAGS)
    return open_ + draw(LAYOUTS).format(body) + close


@st.composite
def model_turn(draw: st.DrawFn) -> tuple[str, frozenset[str] | None]:
    """``(text, allowed)``: an assistant turn with 0..3 call blocks (or a bare JSON call, random
    text, or deep JSON), and the tool names the turn may call."""
    kind = draw(TURN_KINDS)
    if kind == "bare":
        text = _json_or_deep(draw(CALL_OBJECTS))
    elif kind == "text":
        text = draw(TURN_TEXT)
    elif kind == "deep":
        text = "<tool_call>" + deep_json(draw(DEEP), kind=draw(KINDS)) + "</tool_call>"
    else:
        blocks = [_block(draw) for _ in range(draw(st.integers(0, 3)))]
        text = draw(JOINS).join([draw(PREFIXES), *blocks, draw(SUFFIXES_TURN)])
    return text, draw(ALLOWED)


MODEL_TURN = model_turn()


# -- tool responses ----------------------------------------------------------------------------

CALL_ID = "call_fuzz1"
ANSWERS = near_valid(ex.obj(
    type=ex.maybe(st.just("function_call_output")), call_id=ex.maybe(st.just(CALL_ID)),
    id=ex.maybe(st.just("fc_1")), output=st.one_of(ex.TEXT, ex.ARGS, st.lists(ex.TEXT, max_size=2))))
ERROR_DOCS = near_valid(st.sampled_from(({"error": {"message": "bad"}}, {"detail": "nope"},
                                         {"detail": [{"loc": ["body"], "msg": "x"}]})))
BODY_KINDS = st.sampled_from(("valid",) * 6 + ("junk", "junk", "bytes", "deep", "error", "error",
                                              "huge"))
RAW_BYTES = st.one_of(st.binary(max_size=64), st.just(b""), st.just(b"\xff\xfe{}"))


@st.composite
def response_body(draw: st.DrawFn) -> bytes:
    """An endpoint's answer body: a near-valid function_call_output, junk JSON, text or bytes,
    deep JSON, or an error document."""
    kind = draw(BODY_KINDS)
    if kind == "junk":
        return encoded(json_text(draw(JSON_VALUES)))
    if kind == "bytes":
        return draw(RAW_BYTES)
    if kind == "deep":
        return encoded(deep_json(draw(DEEP), kind=draw(KINDS)))
    if kind == "error":
        return encoded(_json_or_deep(draw(ERROR_DOCS)))
    if kind == "huge":  # around the 1 MB limit of the hosted contract
        size = draw(st.sampled_from(((1 << 20) - 40, (1 << 20) + 1, 3 << 20)))
        return b'{"output": "' + b"x" * size + b'"}'
    text = _json_or_deep(draw(ANSWERS), draw(st.booleans()))
    if draw(ONE_IN_FIVE) == 0:
        text = corrupt_text(draw, text)
    return encoded(text)


RESPONSE_BODY = response_body()
HEADERS = st.lists(st.sampled_from((
    (b"content-type", b"application/json"), (b"content-type", b"text/plain; charset=utf-8"),
    (b"content-type", b"application/json; charset=latin-1"), (b"content-encoding", b"gzip"),
    (b"content-encoding", b"br"), (b"content-encoding", b"deflate"), (b"content-encoding", b"zstd"),
    (b"content-encoding", b"identity"), (b"content-encoding", b"x-garbage"), (b"x-extra", b"1"))),
    max_size=2, unique=True)
STATUS = st.one_of(st.sampled_from((200, 200, 200, 201, 202, 204, 301, 304, 400, 401, 404, 408, 413,
                                    422, 429, 500, 502, 503)), st.integers(200, 599))
ITEM = st.dictionaries(st.text(max_size=5), SMALL_JSON_VALUES, max_size=3)
"""A task's item, sent with every tool call (anything a dataset row may carry)."""
HTTP_CALL = st.tuples(st.tuples(STATUS, HEADERS, RESPONSE_BODY), ITEM)
"""``((status, headers, body), item)``: a tool server on 127.0.0.1 answers a call with the
status, headers and body; the call carries the item."""
