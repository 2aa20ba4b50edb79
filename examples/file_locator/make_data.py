"""Write the file-locator example's repositories and task sets (run: python make_data.py [OUT]).

Five small generated Python repositories (``repos/<name>/``: modules, tests, settings, docs) are
shared by every task. A task is a change request about one repository; its reference answer is
the set of files to edit (1-3): the module that defines each function the request names, plus
that module's test file when the request asks for tests. Every row carries two worked examples as
real turns on the same repository, with the tools' real output: one answers a request with
tests, the other a two-part request with two ``grep`` calls in one turn (a parallel call). Same
bytes on every run (fixed seeds, no clocks).
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path
from typing import Any

from arft.pyfile import load_file

HERE = Path(__file__).resolve().parent


def _load(name: str) -> Any:
    """A sibling module by path (this script also runs imported from tests)."""
    return load_file(HERE / f"{name}.py", f"file_locator_{name}")


specs = _load("repo_specs")
tools = _load("tools")

SYSTEM = ("Find the files to edit for a change request. Use the tools (calls in one turn run in "
          "parallel), then answer with the file paths, one per line, nothing else. Name a test "
          "file only when the request asks for tests.")
PARAMS = ("currency", "locale", "verbose", "limit", "strict", "timezone", "dry_run")
SINGLE = ("Add an optional `{param}` parameter to `{fn}`", "Make `{fn}` raise a `ValueError` on invalid input",
          "Log a debug message every time `{fn}` runs", "Add type hints to `{fn}`",
          "Cache the result of `{fn}`", "Fix the off-by-one bug in `{fn}`",
          "Make `{fn}` accept `None` and return an empty result")
PAIR = ("Add an optional `{param}` parameter to `{fn}` and show it in `{fn2}`",
        "Make `{fn}` raise a `ValueError` on invalid input and catch it in `{fn2}`",
        "Add a `{param}` field to what `{fn}` returns and use it in `{fn2}`",
        "Move the rounding from `{fn}` into `{fn2}`")
TESTS = (", and update its tests", ", and add a test for it", ". Cover the change in the tests")
# Per repository: 10 one-file, 9 module + test, 11 two-module and 6 three-file requests.
KINDS = ("single",) * 10 + ("tests",) * 9 + ("pair",) * 11 + ("triple",) * 6
TRAIN_PER_REPO = 24


# ---- repositories ------------------------------------------------------------------------

def test_path(module_path: str) -> str:
    return f"tests/test_{Path(module_path).stem}.py"


def module_source(m: Any) -> str:
    parts = [f'"""{m.doc}"""\n']
    if m.imports:
        parts.append(m.imports + "\n")
    for fn in m.fns:
        body = "\n".join("    " + line for line in fn.body.splitlines())
        parts.append(f"\ndef {fn.name}({fn.params}):\n    \"\"\"{fn.doc}\"\"\"\n{body}\n")
    return "\n".join(parts)


def test_source(m: Any) -> str:
    dotted = m.path[:-3].replace("/", ".")
    names = ", ".join(fn.name for fn in m.fns)
    tests = "".join(f"\n\ndef test_{fn.name}():\n    result = {fn.example}\n    assert result is not None\n"
                    for fn in m.fns)
    return f'"""Tests of {m.path}."""\n\nfrom {dotted} import {names}\n{tests}'


def repo_files(repo: Any) -> dict[str, str]:
    """Every file of a generated repository: path -> text."""
    files: dict[str, str] = {}
    for m in repo.modules:
        files[m.path] = module_source(m)
        files[test_path(m.path)] = test_source(m)
        package = m.path.split("/")[0]
        files[f"{package}/__init__.py"] = f'"""The {package} package of {repo.name}."""\n'
    files["tests/__init__.py"] = ""
    files["config/settings.yaml"] = "".join(f"{k}: {v}\n" for k, v in repo.settings)
    half = len(repo.modules) // 2
    for i, (path, title) in enumerate(repo.docs):
        mods = repo.modules[:half] if i == 0 else repo.modules[half:]
        files[path] = (f"# {title}\n\nHow {title.lower()} work in {repo.name}.\n\n"
                       + "".join(f"- {m.doc}\n" for m in mods))
    folders = sorted({m.path.split("/")[0] for m in repo.modules})
    files["README.md"] = (f"# {repo.name}\n\n{repo.title}\n\n## Layout\n\n"
                          + "".join(f"- `{f}/`\n" for f in folders)
                          + "- `tests/`: one test file per module\n- `config/settings.yaml`: defaults\n")
    files["pyproject.toml"] = f'[project]\nname = "{repo.name}"\nversion = "0.1.0"\nrequires-python = ">=3.10"\n'
    files["CHANGELOG.md"] = "# Changelog\n\n## 0.1.0\n\n- First release.\n"
    return dict(sorted(files.items()))


def write_repos(out: Path) -> None:
    root = out / "repos"
    if root.exists():
        shutil.rmtree(root)  # regenerate from scratch: no stale files survive a spec change
    for repo in specs.REPOS:
        for rel, text in repo_files(repo).items():
            path = root / repo.name / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


# ---- tasks -------------------------------------------------------------------------------

def functions(repo: Any) -> list[tuple[str, str]]:
    """``(function name, module path)`` of every function of a repository."""
    return [(fn.name, m.path) for m in repo.modules for fn in m.fns]


def make_request(rng: random.Random, repo: Any, kind: str) -> tuple[str, list[str], set[str], tuple]:
    """``(request text, files to edit, modules it touches, uniqueness key)`` of one task."""
    fns = functions(repo)
    fn, path = rng.choice(fns)
    param = rng.choice(PARAMS)
    if kind in ("single", "tests"):
        template = rng.choice(SINGLE)
        text = template.format(fn=fn, param=param)
        files, touched, key = [path], {path}, (kind, fn, template)
    else:
        fn2, path2 = rng.choice([f for f in fns if f[1] != path])
        template = rng.choice(PAIR)
        text = template.format(fn=fn, fn2=fn2, param=param)
        files, touched, key = [path, path2], {path, path2}, (kind, fn, fn2, template)
    if kind in ("tests", "triple"):
        text += rng.choice(TESTS)
        files.append(test_path(path))
    return text + ".", sorted(files), touched, key


def call(call_id: str, name: str, arguments: dict[str, str]) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def worked_examples(rng: random.Random, repo: Any, repo_dir: Path, avoid: set[str]) -> list[dict]:
    """Two solved requests on ``repo`` about modules the task does not touch, as real turns."""
    fns = [f for f in functions(repo) if f[1] not in avoid]
    (a, pa), = rng.sample(fns, 1)
    b, pb = rng.choice([f for f in fns if f[1] != pa])
    c, pc = rng.choice([f for f in fns if f[1] not in (pa, pb)])
    param = rng.choice(PARAMS)
    # The parallel example comes last, nearest the task: a 135M model copies the closest pattern.
    turns: list[dict] = [
        {"role": "user", "content": f"Make `{c}` raise a `ValueError` on invalid input, and update its tests."},
        {"role": "assistant", "content": None, "tool_calls": [call("call_ex_1", "grep", {"pattern": c})]},
        {"role": "tool", "tool_call_id": "call_ex_1", "content": tools.grep_in(repo_dir, c)},
        {"role": "assistant", "content": "\n".join(sorted([pc, test_path(pc)]))}]
    turns += [{"role": "user", "content": f"Add an optional `{param}` parameter to `{a}` and show it in `{b}`."},
              {"role": "assistant", "content": None,
               "tool_calls": [call("call_ex_2", "grep", {"pattern": a}), call("call_ex_3", "grep", {"pattern": b})]},
              {"role": "tool", "tool_call_id": "call_ex_2", "content": tools.grep_in(repo_dir, a)},
              {"role": "tool", "tool_call_id": "call_ex_3", "content": tools.grep_in(repo_dir, b)},
              {"role": "assistant", "content": "\n".join(sorted([pa, pb]))}]
    return turns


def repo_tasks(repo: Any, repo_dir: Path, seed: int) -> list[dict]:
    """36 distinct tasks on one repository, shuffled."""
    rng = random.Random(seed)
    seen: set[tuple] = set()
    rows: list[dict] = []
    for kind in KINDS:
        while True:
            text, files, touched, key = make_request(rng, repo, kind)
            if key not in seen:
                seen.add(key)
                break
        rows.append({"messages": [{"role": "system", "content": SYSTEM},
                                  *worked_examples(rng, repo, repo_dir, touched),
                                  {"role": "user", "content": text}],
                     "repo": repo.name, "files": files, "kind": kind})
    rng.shuffle(rows)
    return rows


def interleave(per_repo: list[list[dict]], split: str) -> list[dict]:
    """Round-robin over repositories, so any prefix (train_10, eval_tasks) covers all of them."""
    rows = [row for group in zip(*per_repo) for row in group]
    return [{"id": f"{split}-{i:03d}", **row} for i, row in enumerate(rows)]


def main(out: Path = HERE) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_repos(out)
    per_repo = [repo_tasks(r, out / "repos" / r.name, seed=100 + i) for i, r in enumerate(specs.REPOS)]
    train = interleave([rows[:TRAIN_PER_REPO] for rows in per_repo], "train")
    validation = interleave([rows[TRAIN_PER_REPO:] for rows in per_repo], "validation")
    for name, rows in (("train", train), ("validation", validation), ("train_10", train[:10])):
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
