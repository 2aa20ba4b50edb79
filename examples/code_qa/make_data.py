"""Write the code_qa example: a generated codebase and questions about it (run: python make_data.py).

Deterministic (fixed seeds, same bytes every run). Writes, beside this file (or under the folder
given as the first argument):

* ``codebase/`` — 26 small services (``config.py``, ``handlers.py``, ``OWNERS``) plus a few shared
  modules: the facts to find (default ports, timeouts, retry limits, event queues, owning teams,
  function names and the files that define them);
* ``train.jsonl`` (questions about 18 services), ``validation.jsonl`` (6 other services),
  ``train_10.jsonl`` (the first 10 training rows). Each row: ``messages`` (system prompt, two
  worked examples as real turns, the question) and ``facts`` (1-3 short strings that appear
  verbatim in the codebase; the grader checks the answer contains them).

``python make_data.py --plain`` writes ``train_plain.jsonl`` and ``validation_plain.jsonl`` instead
(for ``job_plain.yaml``): the same tasks as real traffic would have them, the system prompt and
the question only, with no worked-example turns.

Every fact value is unique in the codebase and no fact is a substring of another number there, so
an answer cannot collect a fact by quoting the wrong file.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from arft.pyfile import load_file


@functools.cache
def load_tools() -> ModuleType:
    """The example's own ``tools.py`` (under a unique name: other examples have a tools.py too)."""
    return load_file(Path(__file__).resolve().parent / "tools.py", "code_qa_tools")


SYSTEM = ("You answer questions about a codebase. Use the search tool to find where something is "
          "defined and the read tool to open a file, then answer in one sentence with the exact "
          "values from the code.")
SERVICES = ["analytics", "audit", "billing", "cart", "catalog", "checkout", "coupons", "fraud",
            "inventory", "ledger", "loyalty", "mailer", "media", "orders", "payments", "pricing",
            "profiles", "ratings", "reports", "search", "sessions", "shipping", "tax", "uploads"]
EXAMPLE_SERVICES = ["gateway", "scheduler"]  # used only by the worked examples, never asked about
TEAMS = ["albatross", "bittern", "condor", "dunlin", "egret", "falcon", "gannet", "heron", "ibis",
         "jacana", "kestrel", "lapwing", "merlin", "nightjar", "osprey", "petrel", "quail", "raven",
         "sandpiper", "tern", "umbrellabird", "vireo", "warbler", "xenops", "yellowlegs", "zebrafinch"]
VERBS = ["rebuild", "settle", "purge", "export", "validate", "merge", "archive", "rotate", "replay",
         "reindex", "throttle", "reconcile", "snapshot", "compact", "refresh"]
ADJECTIVES = ["stale", "pending", "expired", "orphaned", "duplicate", "failed", "nightly", "partial"]
NOUNS = ["invoices", "tokens", "batches", "records", "tickets", "receipts", "cursors", "buckets",
         "webhooks", "ledgers", "quotas", "manifests", "sessions", "vouchers", "shards"]
QUEUE_TOPICS = ["sync", "fanout", "events", "changes", "audit-trail", "notify", "backfill", "dlq"]
N_VALIDATION_SERVICES = 6


def pick_numbers(rng: random.Random) -> dict[str, dict[str, int]]:
    """Ports, timeouts and retry limits per service, unique, no fact inside another number."""
    names = SERVICES + EXAMPLE_SERVICES
    # Retry limits are two-digit and above 30 so they never equal a line number (files are short).
    retries = rng.sample(range(31, 100), len(names))

    def clean(n: int) -> bool:
        return not any(str(r) in str(n) for r in retries)

    ports = rng.sample([p for p in range(7000, 9900) if clean(p)], len(names))
    timeouts = rng.sample([t for t in range(1200, 6900, 10) if clean(t)], len(names))
    return {s: {"port": p, "timeout": t, "retries": r}
            for s, p, t, r in zip(names, ports, timeouts, retries)}


def service_files(rng: random.Random, svc: str, nums: dict[str, int], team: str,
                  used_fns: set[str]) -> tuple[dict[str, str], dict]:
    """The files of one service and the facts they hold."""
    queue = f"{svc}.{rng.choice(QUEUE_TOPICS)}.v{rng.randint(2, 9)}"
    fns = []
    while len(fns) < 3:
        verb, adj, noun = rng.choice(VERBS), rng.choice(ADJECTIVES), rng.choice(NOUNS)
        name = f"{verb}_{adj}_{noun}"
        if name not in used_fns and verb not in {f[1] for f in fns}:
            used_fns.add(name)
            fns.append((name, verb, adj, noun))
    config = (f'"""Runtime settings of the {svc} service."""\n\n'
              f'SERVICE_NAME = "{svc}"\n'
              f"DEFAULT_PORT = {nums['port']}\n"
              f"REQUEST_TIMEOUT_MS = {nums['timeout']}\n"
              f"MAX_RETRIES = {nums['retries']}\n"
              f'EVENT_QUEUE = "{queue}"\n'
              f'LOG_LEVEL = "{rng.choice(["INFO", "WARNING", "DEBUG"])}"\n')
    handlers = [f'"""Request handlers of the {svc} service."""\n\n'
                f"from services.{svc}.config import MAX_RETRIES\n"]
    for name, verb, adj, noun in fns:
        handlers.append(f"\n\ndef {name}(items):\n"
                        f'    """{verb.capitalize()} {adj} {noun}."""\n'
                        f"    return [item for item in items if item is not None]\n")
    owners = f"owner: team-{team}\noncall: #{team}-oncall\n"
    files = {f"services/{svc}/config.py": config, f"services/{svc}/handlers.py": "".join(handlers),
             f"services/{svc}/OWNERS": owners}
    facts = {"service": svc, "port": str(nums["port"]), "timeout": str(nums["timeout"]),
             "retries": str(nums["retries"]), "queue": queue, "team": f"team-{team}",
             "functions": fns, "handlers_path": f"services/{svc}/handlers.py"}
    return files, facts


SHARED_FILES = {
    "common/http.py": ('"""HTTP client defaults shared by every service (each overrides them)."""\n\n'
                       "DEFAULT_TIMEOUT_MS = 30000\nDEFAULT_MAX_RETRIES = 3\n"
                       'USER_AGENT = "shop-platform"\n'),
    "common/logging.py": ('"""Log formatting shared by every service."""\n\n'
                          'LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"\n'),
    "common/queues.py": ('"""The message broker connection used for every EVENT_QUEUE."""\n\n'
                         'BROKER_URL = "amqp://broker.internal"\n'),
    "README.md": ("# shop-platform\n\nOne folder per service under services/: config.py holds its "
                  "settings, handlers.py its functions, OWNERS its team.\n"),
}


@dataclass(frozen=True)
class Question:
    """One question about one service: its kind, text, reference facts, and (for the worked
    examples) a good search query, the file that holds the facts and a model answer."""

    kind: str
    text: str
    facts: list[str]
    query: str
    path: str
    answer: str


def questions(f: dict) -> list[Question]:
    """Every question about one service (one per kind; one per function for ``function``)."""
    svc, port, retries, timeout, queue = f["service"], f["port"], f["retries"], f["timeout"], f["queue"]
    config, owners = f"services/{svc}/config.py", f"services/{svc}/OWNERS"
    out = [
        Question("port", f"What is the default port of the {svc} service?", [port],
                 f"{svc} default port", config, f"The default port of the {svc} service is {port}."),
        Question("retries", f"What is the max retries setting of the {svc} service?", [retries],
                 f"{svc} max retries", config, f"The max retries setting of the {svc} service is {retries}."),
        Question("timeout", f"What is the request timeout in ms of the {svc} service?", [timeout],
                 f"{svc} request timeout", config,
                 f"The request timeout of the {svc} service is {timeout} ms."),
        Question("queue", f"Which event queue does the {svc} service use?", [queue],
                 f"{svc} event queue", config, f"The {svc} service uses the event queue {queue}."),
        Question("team", f"Which team owns the {svc} service?", [f["team"]], f"{svc} team owner",
                 owners, f"The {svc} service is owned by {f['team']}."),
        Question("port+retries", f"What are the default port and the max retries of the {svc} service?",
                 [port, retries], f"{svc} default port max retries", config,
                 f"The {svc} service has default port {port} and max retries {retries}."),
        Question("port+timeout+queue", f"What are the default port, the request timeout in ms and the "
                 f"event queue of the {svc} service?", [port, timeout, queue],
                 f"{svc} default port request timeout event queue", config,
                 f"The {svc} service has default port {port}, request timeout {timeout} ms and event "
                 f"queue {queue}."),
    ]
    for name, verb, adj, noun in f["functions"]:
        out.append(Question("function", f"Which function of the {svc} service is used to {verb} {adj} "
                            f"{noun}?", [name], f"{svc} {verb} {adj} {noun}", f["handlers_path"],
                            f"The {svc} service uses the function {name} to {verb} {adj} {noun}."))
    name = f["functions"][0][0]
    out.append(Question("file", f"Which file defines the function {name}?", [f["handlers_path"]],
                        name, f["handlers_path"], f"The function {name} is defined in {f['handlers_path']}."))
    return out


def tool_turns(root: Path, q: Question, calls: list[tuple[str, dict]], tag: str) -> list[dict]:
    """A worked example as real turns: the question, each call with its real output, the answer."""
    tools = load_tools()
    run = {"search": lambda a: tools.search_in(root, a["query"]),
           "read": lambda a: tools.read_in(root, a["path"])}
    turns: list[dict] = [{"role": "user", "content": q.text}]
    outputs = []
    for i, (name, args) in enumerate(calls):
        call_id = f"call_example_{tag}_{i}"
        outputs.append(run[name](args))
        turns += [{"role": "assistant", "content": None, "tool_calls": [{
                      "id": call_id, "type": "function",
                      "function": {"name": name, "arguments": json.dumps(args)}}]},
                  {"role": "tool", "tool_call_id": call_id, "content": outputs[-1]}]
    missing = [fact for fact in q.facts if not any(fact in out for out in outputs)]
    if missing:
        raise AssertionError(f"worked example {q.text!r}: the tool outputs do not show {missing}")
    return turns + [{"role": "assistant", "content": q.answer}]


def worked_examples(root: Path, facts: dict[str, dict]) -> dict[str, list[dict]]:
    """Per question kind, two worked examples of that kind about the two example services: one
    answered from a search alone, one from a search and then a read of the file it found."""
    out = {}
    for one, two in zip(questions(facts[EXAMPLE_SERVICES[0]]), questions(facts[EXAMPLE_SERVICES[1]])):
        if one.kind not in out:  # 'function' has one question per function: use the first
            out[one.kind] = (tool_turns(root, one, [("search", {"query": one.query})], one.kind + "_1")
                             + tool_turns(root, two, [("search", {"query": two.query}),
                                                      ("read", {"path": two.path})], two.kind + "_2"))
    return out


def check_unique(files: dict[str, str], all_facts: list[str]) -> None:
    """Each fact occurs in exactly one file, and no number fact hides inside another number."""
    numbers = {n for text in files.values() for n in re.findall(r"\d+", text)}
    for fact in all_facts:
        where = [p for p, text in files.items() if fact in text]
        if fact.isdigit() and any(fact in n and fact != n for n in numbers):
            raise AssertionError(f"fact {fact} is part of another number in the codebase")
        if len(where) != 1 and not fact.startswith("services/"):
            raise AssertionError(f"fact {fact!r} occurs in {where}, not in exactly one file")


def task_row(split: str, i: int, svc: str, q: Question, examples: list[dict]) -> dict:
    """One task row: the system prompt, the ``examples`` turns (none for a plain row), the question.

    Its item also carries what a teacher would know, as real datasets often do: the search an expert
    runs (``query``) and the file that holds the facts (``file``). The model never sees them; a
    rescue hint (``training.rescue.hint``) may."""
    return {"id": f"{split}-{i:03d}",
            "messages": [{"role": "system", "content": SYSTEM}, *examples, {"role": "user", "content": q.text}],
            "facts": q.facts, "service": svc, "kind": q.kind, "query": q.query, "file": q.path}


def build(out: Path, plain: bool = False) -> None:
    """Generate everything under ``out`` (``plain``: the plain rows instead of the full ones)."""
    rng = random.Random(5)
    nums = pick_numbers(rng)
    teams = dict(zip(SERVICES + EXAMPLE_SERVICES, rng.sample(TEAMS, len(TEAMS))))
    files, facts, used_fns = dict(SHARED_FILES), {}, set()
    for svc in SERVICES + EXAMPLE_SERVICES:
        svc_files, facts[svc] = service_files(rng, svc, nums[svc], teams[svc], used_fns)
        files.update(svc_files)
    rows = {svc: questions(facts[svc]) for svc in SERVICES}
    check_unique(files, [fact for qs in rows.values() for q in qs for fact in q.facts])
    root = out / "codebase"
    for rel, text in sorted(files.items()):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    examples = worked_examples(root, facts)
    order = rng.sample(SERVICES, len(SERVICES))
    splits = {"validation": order[:N_VALIDATION_SERVICES], "train": order[N_VALIDATION_SERVICES:]}
    for split, services in splits.items():
        # The worked examples' search outputs list a few other services' lines too: a question
        # whose answer is already in its own prompt would need no tool, so it is left out.
        pairs = [(svc, q) for svc in sorted(services) for q in rows[svc]
                 if not any(fact in json.dumps(examples[q.kind]) for fact in q.facts)]
        rng.shuffle(pairs)  # mix question kinds so the first N rows (eval_tasks) cover them all
        lines = [json.dumps(task_row(split, i, svc, q, [] if plain else examples[q.kind])) + "\n"
                 for i, (svc, q) in enumerate(pairs)]
        if plain:
            (out / f"{split}_plain.jsonl").write_text("".join(lines))
            continue
        (out / f"{split}.jsonl").write_text("".join(lines))
        if split == "train":
            (out / "train_10.jsonl").write_text("".join(lines[:10]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", type=Path, default=Path(__file__).resolve().parent,
                        help="output folder (default: this one)")
    parser.add_argument("--plain", action="store_true", help="write the plain rows (no worked examples)")
    args = parser.parse_args()
    build(args.out, args.plain)


if __name__ == "__main__":
    main()
