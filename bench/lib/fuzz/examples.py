"""Valid examples of every fuzzed input, as Hypothesis strategies: dataset rows, logged traffic
lines, job specs, grader specs and tool-call blocks. ``bench.lib.fuzz.strategies.near_valid`` mutates
them; each is valid as generated (the fuzz tests check a sample of them loads)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

TOOL_NAMES = ("lookup_order", "calculator", "search", "get_weather")
WORDS = st.sampled_from(("Paris", "order 42", "What is 12 * 7?", "ok", "the answer is 84",
                         "Résumé 🙂", "line one\nline two", "x" * 200))
TEXT = st.one_of(WORDS, st.text(min_size=1, max_size=30))
SPEC_TEXT = TEXT.filter(lambda t: "\x00" not in t)
"""Text a valid job or grader spec may hold: every spec string refuses a NUL character."""
NAME = st.sampled_from(TOOL_NAMES)
CALL_ID = st.sampled_from(("call_1", "call_2", "call_abc"))


def obj(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A dict strategy; a field whose strategy draws ``...`` is left out."""
    return st.fixed_dictionaries(fields).map(lambda d: {k: v for k, v in d.items() if v is not ...})


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``strategy``'s value or ``...`` (the field is absent)."""
    return st.one_of(st.just(...), strategy)


# -- chat messages and tools -------------------------------------------------------------------

ARGS = st.fixed_dictionaries({"q": TEXT}, optional={"n": st.integers(-5, 5), "city": WORDS})
PARAMETERS = st.just({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})


def tool_schema(draw: st.DrawFn, name: str) -> dict[str, Any]:
    """A function schema, completions shape or the flat Responses-API shape."""
    fn = {"name": name, "description": draw(TEXT), "parameters": draw(PARAMETERS)}
    if draw(st.booleans()):
        return {"type": "function", "function": fn}
    return {"type": "function", **fn, **({"strict": True} if draw(st.booleans()) else {})}


CONTENT = st.one_of(TEXT, st.lists(st.fixed_dictionaries(
    {"type": st.sampled_from(("text", "input_text", "output_text")), "text": TEXT}),
    min_size=1, max_size=3))
CALL_IDS = st.lists(CALL_ID, min_size=1, max_size=3, unique=True)
ARGUMENTS = st.one_of(ARGS.map(json.dumps), ARGS)
MAYBE_TEXT = st.one_of(st.none(), TEXT)
PROMPT_ROLE = st.sampled_from(("system", "developer"))


def tool_exchange(draw: st.DrawFn) -> list[dict[str, Any]]:
    """An assistant turn with tool calls and the tool messages answering them."""
    ids = draw(CALL_IDS)
    calls = [{"id": i, "type": "function", "function": {
        "name": draw(NAME), "arguments": draw(ARGUMENTS)}} for i in ids]
    turn = {"role": "assistant", "content": draw(MAYBE_TEXT), "tool_calls": calls}
    return [turn, *({"role": "tool", "tool_call_id": i, "content": draw(TEXT)} for i in ids)]


def chat(draw: st.DrawFn, answer: bool = False) -> list[dict[str, Any]]:
    """system?, user, [a few-shot tool exchange and answer, user], [assistant answer]."""
    out = []
    if draw(st.booleans()):
        out.append({"role": draw(PROMPT_ROLE), "content": draw(TEXT)})
    out.append({"role": "user", "content": draw(CONTENT)})
    if draw(st.booleans()):
        out += tool_exchange(draw)
        out += [{"role": "assistant", "content": draw(TEXT)}, {"role": "user", "content": draw(TEXT)}]
    if answer:
        if draw(st.booleans()):
            out += tool_exchange(draw)
        out.append({"role": "assistant", "content": draw(TEXT)})
    return out


MESSAGES = st.composite(chat)()


TOOL_CHOICE = st.one_of(st.sampled_from(("auto", "none", "required")), NAME,
                        NAME.map(lambda n: {"type": "function", "function": {"name": n}}))


NAMES = st.lists(NAME, min_size=1, max_size=3, unique=True)


@st.composite
def tools_list(draw: st.DrawFn) -> list[dict[str, Any]]:
    return [tool_schema(draw, n) for n in draw(NAMES)]


TOOLS = tools_list()
DATASET_ROW = st.tuples(obj(messages=MESSAGES, tools=maybe(TOOLS), tool_choice=maybe(TOOL_CHOICE),
                             answer=maybe(TEXT), facts=maybe(st.lists(TEXT, max_size=3))),
                        st.integers(0, 10**6)).map(lambda p: {**p[0], "id": f"row-{p[1]}"})
"""One valid dataset row (the hosted format: messages, tools?, tool_choice?, item keys)."""


# -- logged traffic ----------------------------------------------------------------------------


REPLY_KINDS = st.sampled_from(("text", "calls", "legacy"))
SHAPES = st.sampled_from(("logged", "request", "finetune"))


def assistant_reply(draw: st.DrawFn) -> dict[str, Any]:
    """The assistant's answer: text, tool calls, or a legacy function_call; odd extra keys."""
    kind = draw(REPLY_KINDS)
    reply: dict[str, Any] = {"role": "assistant", "content": draw(TEXT)}
    if kind == "calls":
        reply = tool_exchange(draw)[0]
    elif kind == "legacy":
        reply = {"role": "assistant", "content": None, "function_call": {
            "name": draw(NAME), "arguments": draw(ARGS.map(json.dumps))}}
    if draw(st.booleans()):
        reply["reasoning_content"] = draw(TEXT)
    return reply


REQUEST = obj(model=st.just("gpt-x"), messages=MESSAGES, tools=maybe(TOOLS),
               tool_choice=maybe(TOOL_CHOICE), temperature=maybe(st.floats(0, 2)))
ROW_KEYS = obj(id=maybe(st.integers(0, 99).map(str)), answer=maybe(TEXT))


@st.composite
def traffic_line(draw: st.DrawFn) -> dict[str, Any]:
    """One logged line: a request/response pair, a bare request, or a fine-tuning row."""
    shape = draw(SHAPES)
    request = draw(REQUEST)
    if shape == "logged":
        reply = assistant_reply(draw)
        response = {"choices": [{"index": 0, "message": reply}]} if draw(st.booleans()) else reply
        return {"request": request, "response": response,
                "metadata": {"expected": draw(TEXT), "user": draw(TEXT)}}
    if shape == "finetune":
        request["messages"] = chat(draw, answer=True)
    return {**request, **draw(ROW_KEYS)}


TRAFFIC_LINE = traffic_line()


# -- grader specs ------------------------------------------------------------------------------

TEMPLATE = st.sampled_from((
    "{{ sample.output_text }}", "{{ item.answer }}", "{{item.answer}}", "{{ sample.output_json }}",
    "{{ sample.output_tools[0].function.arguments.q }}", "{{ sample.trajectory }}",
    "{{ item[\"a b\"] }}", "{{ item.facts[-1] }}", "Answer: {{ sample.output_text }}", "plain",
    "{{ item.facts[" + "9" * 5_000 + "] }}", "{{ item.facts[١] }}", "{{ sample.output_tools[²] }}"))
SOURCE = st.sampled_from((
    "def grade(sample, item):\n    return 1.0\n",
    "def grade(sample, item):\n    return {'score': 0.5, 'sub_scores': {'a': 1.0}}\n",
    "import json\n\ndef grade(s, i, *rest):\n    return float(len(s['output_text']) > 0)\n",
))
BROKEN_SOURCE = st.sampled_from((
    "def grade(sample, item)\n    return 1\n", "async def grade(sample, item):\n    return 1\n",
    "def grade(sample):\n    return 1\n", "x = 1\n", "def grade(sample, item):\n    return 1\x00\n",
    "def grade(sample, item):\n    return " + "1 + " * 20_000 + "1\n",
    "def grade(sample, item):\n    return " + "-" * 20_000 + "1\n",
    "def grade(sample, item):\n    return " + "(" * 300 + "1" + ")" * 300 + "\n",
    "def grade(sample, item):\n" + "".join(" " * i + "if 1:\n" for i in range(1, 120))
    + " " * 120 + "pass\n",
))
"""Python grader code that must fail to build with a GraderError naming the problem."""
FORMULAS = ("{a}", "0.5 * {a} + 0.5 * {b}", "min({a}, {b})", "max({a}, 1 - {b}) ^ 2",
            "log({a} + 1, 2) / sqrt({b} + 1)", "-{a} + abs({b}) * floor(2.5) - ceil(0.1)")
JUDGE_INPUT = st.lists(st.fixed_dictionaries({
    "role": st.sampled_from(("system", "user")),
    "content": st.one_of(TEMPLATE, st.lists(st.fixed_dictionaries(
        {"type": st.just("input_text"), "text": TEMPLATE}), min_size=1, max_size=2))}),
    min_size=1, max_size=2)
JUDGE = {"model": st.just("judge-model"), "base_url": maybe(st.just("http://127.0.0.1:9/v1")),
         "sampling_params": maybe(st.just({"temperature": 0.0, "max_completions_tokens": 50})),
         "timeout_s": maybe(st.floats(0.1, 60))}


def leaf_grader() -> st.SearchStrategy[dict[str, Any]]:
    """A valid grader spec of any type except the recursive ones."""
    name = maybe(st.sampled_from(("g", "exact", "My grader")))
    return st.one_of(
        obj(type=st.just("string_check"), name=name, input=TEMPLATE, reference=TEMPLATE,
             operation=st.sampled_from(("eq", "ne", "neq", "like", "ilike"))),
        obj(type=st.just("text_similarity"), name=name, input=TEMPLATE, reference=TEMPLATE,
             evaluation_metric=st.sampled_from(("fuzzy_match", "bleu", "gleu", "rouge_1", "rouge_l")),
             pass_threshold=maybe(st.floats(0, 1))),
        obj(type=st.just("score_model"), name=name, input=JUDGE_INPUT,
             range=maybe(st.just([0, 10])), pass_threshold=maybe(st.floats(0, 1)), **JUDGE),
        obj(type=st.just("label_model"), name=name, input=JUDGE_INPUT,
             labels=st.just(["good", "bad"]), passing_labels=st.just(["good"]), **JUDGE),
        obj(type=st.just("python"), name=name, source=SOURCE, timeout_s=maybe(st.floats(1, 60))),
        obj(type=st.just("python"), name=name, source_file=st.just("grader.py")),
        obj(type=st.just("endpoint"), name=name, url=st.just("http://127.0.0.1:9/grade"),
             headers=maybe(st.just({"Authorization": "Bearer x"})), max_retries=maybe(st.integers(0, 3)),
             rate_limit_per_s=maybe(st.floats(0.1, 100))),
        builtin_grader())


def builtin_grader() -> st.SearchStrategy[dict[str, Any]]:
    """arft's built-in designs (``type: builtin``) but judge_hack_check."""
    b = st.just("builtin")
    return st.one_of(
        obj(type=b, name=st.just("set_f1"), predicted=TEMPLATE,
             reference=st.one_of(TEMPLATE, st.lists(SPEC_TEXT, max_size=3)),
             normalize=maybe(st.sampled_from(("path", "lower", "none"))), beta=maybe(st.floats(0.1, 4))),
        obj(type=b, name=st.just("fact_recall"), facts=st.one_of(TEMPLATE, st.lists(SPEC_TEXT, max_size=3)),
             mode=maybe(st.just("string")), case_sensitive=maybe(st.booleans())),
        obj(type=b, name=st.just("tests_pass"), command=maybe(st.just("python -m pytest -q")),
             tests=maybe(st.one_of(st.just("tests"), st.just({"test_a.py": "def test_a():\n    pass\n"}))),
             mode=maybe(st.sampled_from(("fraction", "all_or_nothing")))),
        obj(type=b, name=st.just("style_penalty"), max_words=maybe(st.integers(0, 300)),
             patterns=maybe(st.lists(st.fixed_dictionaries(
                 {"regex": st.sampled_from(("(?i)lol", r"\bawesome\b", "!!+")),
                  "label": st.sampled_from(("slang", "hype"))}), max_size=2))),
        obj(type=b, name=st.just("verification_bonus"), tools=maybe(st.just(["run_tests"])),
             patterns=maybe(st.just(["pytest", "make test"])),
             output_patterns=maybe(st.just([r"\d+ passed"]))),
        obj(type=b, name=st.just("tool_budget"), budget=st.integers(0, 10),
             kind=maybe(st.sampled_from(("linear", "step"))),
             count=maybe(st.sampled_from(("executed", "all")))),
        obj(type=b, name=st.just("ast_guard"), code=maybe(TEMPLATE),
             required_function=maybe(st.sampled_from(("solve", "ModelNew.forward"))),
             forbidden_names=maybe(st.just(["reference.solve"])),
             checks=maybe(st.just(["hardcoded_outputs", "exits_early"])),
             penalty=maybe(st.sampled_from(("zero", 0.5)))),
    )


def grader_spec(depth: int = 2) -> st.SearchStrategy[dict[str, Any]]:
    """Any valid grader spec: a leaf, or (``depth`` > 0) a ``multi`` or ``judge_hack_check``."""
    if depth <= 0:
        return leaf_grader()
    child = grader_spec(depth - 1)
    multi = multi_grader(child)
    judge = obj(type=st.just("builtin"), name=st.just("judge_hack_check"), grader=child,
                 hacks=maybe(st.just([{"name": "hardcode", "description": "returns a constant"}])),
                 **JUDGE)
    return st.one_of(leaf_grader(), leaf_grader(), multi, judge)


CHILD_KEYS = st.lists(st.sampled_from(("a", "b", "c")), min_size=2, max_size=3, unique=True)


@st.composite
def multi_grader(draw: st.DrawFn, child: st.SearchStrategy[Any]) -> dict[str, Any]:
    keys = draw(CHILD_KEYS)
    formula = draw(st.sampled_from(FORMULAS)).format(a=keys[0], b=keys[1])
    return {"type": "multi", "graders": {k: draw(child) for k in keys}, "calculate_output": formula}


GRADER_SPEC = grader_spec(2)


# -- job specs ---------------------------------------------------------------------------------

TOOL_SPECS = st.one_of(
    obj(name=NAME, server_url=st.just("http://127.0.0.1:8765/tool"),
         headers=maybe(st.just({"Authorization": "Bearer t"})), parameters=maybe(PARAMETERS)),
    obj(type=st.just("python"), function=st.just("tools.py:lookup"), name=maybe(NAME)),
    obj(type=st.just("shell"), timeout_s=maybe(st.floats(1, 30))),
    obj(type=st.just("mcp"), command=st.just(["python", "server.py"]), include=maybe(st.just(["a"]))),
)
HYPER = obj(**{k: maybe(st.one_of(st.just("auto"), st.integers(1, 8))) for k in
                ("n_epochs", "batch_size", "eval_interval", "eval_samples")},
             learning_rate_multiplier=maybe(st.one_of(st.just("auto"), st.floats(0.1, 2))))


def job_spec() -> st.SearchStrategy[dict[str, Any]]:
    """A valid job: the hosted fields, a grader, tools, and some of arft's sections (the
    grader nests one level: a multi of leaves, at most)."""
    reinforcement = obj(grader=grader_spec(1), tools=maybe(st.lists(TOOL_SPECS, max_size=3)),
                         max_episode_steps=maybe(st.one_of(st.just("auto"), st.integers(1, 10))),
                         hyperparameters=maybe(HYPER))
    return obj(
        model=maybe(st.sampled_from(("smollm2-135m-instruct", "Qwen/Qwen2.5-0.5B-Instruct"))),
        training_file=maybe(st.just("train.jsonl")), validation_file=maybe(st.just("val.jsonl")),
        seed=maybe(st.integers(0, 2**31)), suffix=maybe(SPEC_TEXT),
        method=reinforcement.map(lambda r: {"type": "reinforcement", "reinforcement": r}),
        # dtype is an option of the local engines only: `openai` with it is a job error
        engine=maybe(st.one_of(obj(type=maybe(st.just("transformers")),
                                   dtype=maybe(st.sampled_from(("auto", "float32")))),
                               obj(type=st.just("openai")))),
        sampling=maybe(obj(temperature=maybe(st.floats(0, 2)), max_new_tokens=maybe(st.integers(1, 512)))),
        rollout=maybe(obj(max_turns=maybe(st.integers(1, 8)), tool_choice=maybe(TOOL_CHOICE),
                           on_max_episode_steps=maybe(st.sampled_from(("refuse", "end"))))),
        budget=maybe(obj(soft_limit=maybe(st.integers(0, 5)),
                         kind=maybe(st.sampled_from(("linear", "step"))))),
        training=maybe(obj(group_size=maybe(st.integers(1, 8)),
                            lora=maybe(obj(r=maybe(st.integers(1, 64)),
                                           target_modules=maybe(st.just("all-linear")))))),
        logging=maybe(obj(tensorboard=maybe(st.booleans()), wandb=maybe(st.just({"project": "p"})))),
    )


# -- tool-call text ----------------------------------------------------------------------------


CALL_ARGS = st.one_of(ARGS, ARGS.map(json.dumps), st.just(""))
CALL_KINDS = st.sampled_from(("hermes", "hermes", "parameters", "function", "list"))


@st.composite
def call_object(draw: st.DrawFn) -> Any:
    """What a model writes inside ``<tool_call>``: Hermes, chat-completions or a batch."""
    args = draw(CALL_ARGS)
    hermes = {"name": draw(NAME), "arguments": args}
    kind = draw(CALL_KINDS)
    if kind == "parameters":
        return {"name": hermes["name"], "parameters": args}
    if kind == "function":
        return {"type": "function", "function": hermes}
    if kind == "list":
        return [hermes, {"name": draw(NAME), "arguments": draw(ARGS)}]
    return hermes


JOB_SPEC = job_spec()
CALL_OBJECT = call_object()
