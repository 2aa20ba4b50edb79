"""Write the finance_lookup example's reports and its deterministic train/validation sets.

    python make_data.py          # regenerates reports/, train.jsonl, validation.jsonl, train_10.jsonl
    python make_data.py --plain  # train_plain.jsonl, validation_plain.jsonl: the same tasks, plain

48 short annual reports (12 fictional companies x 2020-2023: revenue with the prior year's,
net income, operating margin, headcount) and questions that name the company and the year, so
`search` finds the report. Most questions are a lookup of a figure the report states; about one
in five needs a small computation (revenue growth %, revenue change, net margin). Each row
carries two worked examples as real conversation turns, their tool outputs produced by the very
server the job calls (a 135M model calls tools only when shown how): one takes the direct path
(one search naming the figure), the other the slow one (search for the report, then read it).
A plain row (``--plain``, for ``job_plain.yaml``) is what real traffic looks like: the system
prompt and the question only, no worked-example turns.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from arft.pyfile import load_file

HERE = Path(__file__).resolve().parent
# By path, under a name of its own: several examples have a server.py.
_server = load_file(HERE / "server.py", "finance_lookup_server")
Library = _server.Library
run_tool = _server.run_tool

COMPANIES = ["Northwind Traders", "Contoso", "Fabrikam", "Tailspin Toys", "Wingtip Air", "Litware",
             "Adventure Works", "Proseware", "Lucerne Publishing", "Woodgrove Bank", "Coho Vineyard",
             "Alpine Ski House"]
YEARS = [2020, 2021, 2022, 2023]
SYSTEM = ("You answer questions about company annual reports. Use the tools to find the figure in "
          "the report, then end with 'Answer: <number> <unit>'.")
LOOKUPS = {  # kind: (question, unit)
    "revenue": ("What was {co} revenue in {y}?", "usd_millions"),
    "net_income": ("What was {co} net income in {y}?", "usd_millions"),
    "operating_margin": ("What was {co} operating margin in {y}?", "percent"),
    "headcount": ("What was {co} headcount in {y}?", "employees"),
}
COMPUTES = {
    "revenue_growth": ("By what percent did {co} revenue grow in {y} compared with {p}?", "percent"),
    "revenue_change": ("By how many $ millions did {co} revenue change from {p} to {y}?", "usd_millions"),
    "net_margin": ("What was {co} net margin in {y} (net income as a percentage of revenue)?", "percent"),
}
# The worked examples' tasks: shown in every row, so never asked.
EXAMPLE_TASKS = [("Fabrikam", 2021, "net_income"), ("Contoso", 2023, "operating_margin")]


def slug(company: str) -> str:
    return "_".join(company.lower().split())


def report_name(company: str, year: int) -> str:
    return f"{slug(company)}_{year}.txt"


def make_figures(rng: random.Random) -> dict[tuple[str, int], dict[str, float]]:
    """Each company's figures per year, the prior year's revenue included (2019 for 2020)."""
    figures: dict[tuple[str, int], dict[str, float]] = {}
    for company in COMPANIES:
        revenue = round(rng.uniform(60, 700), 1)
        headcount = rng.randint(150, 1900)
        for year in YEARS:
            prior, revenue = revenue, round(revenue * rng.uniform(0.88, 1.25), 1)
            headcount = max(120, round(headcount * rng.uniform(0.9, 1.15)))
            if 1900 <= headcount <= 2100:  # never a figure that reads like a year
                headcount += 250
            figures[company, year] = {
                "revenue": revenue, "prior_revenue": prior,
                "net_income": round(revenue * rng.uniform(0.02, 0.16), 1),
                "operating_margin": round(rng.uniform(4, 26), 1), "headcount": headcount}
    return figures


def report_text(company: str, year: int, f: dict[str, float]) -> str:
    return (f"{company} annual report {year}\n"
            f"Revenue: ${f['revenue']:.1f} million ({year - 1}: ${f['prior_revenue']:.1f} million)\n"
            f"Net income: ${f['net_income']:.1f} million\n"
            f"Operating margin: {f['operating_margin']:.1f} %\n"
            f"Headcount: {int(f['headcount']):,} employees\n")


def answer_of(kind: str, f: dict[str, float]) -> float:
    if kind in LOOKUPS:
        return f[kind]
    if kind == "revenue_growth":
        return round(100 * (f["revenue"] / f["prior_revenue"] - 1), 1)
    if kind == "revenue_change":
        return round(f["revenue"] - f["prior_revenue"], 1)
    return round(100 * f["net_income"] / f["revenue"], 1)  # net_margin


def answer_text(value: float, unit: str) -> str:
    if unit == "usd_millions":
        return f"${value:.1f} million" if value >= 0 else f"-${-value:.1f} million"
    if unit == "percent":
        return f"{value:.1f} %"
    return f"{int(value):,} employees"


def question_of(company: str, year: int, kind: str) -> tuple[str, str]:
    template, unit = {**LOOKUPS, **COMPUTES}[kind]
    owner = company + ("'" if company.endswith("s") else "'s")
    return template.format(co=owner, y=year, p=year - 1), unit


# The figures a computation needs, as an expert searches for them (one search shows both lines).
COMPUTE_INPUTS = {"revenue_growth": "revenue", "revenue_change": "revenue", "net_margin": "net income revenue"}


def expert_query(company: str, year: int, kind: str) -> str:
    """The search an expert runs for the task: the company, the year and the figure's words as the
    question says them (a computation: the figures it needs), as the worked examples search."""
    return f"{company} {year} {COMPUTE_INPUTS.get(kind) or kind.replace('_', ' ')}"


def call_turns(question: str, calls: list[tuple[str, dict[str, Any]]], final: str, library: Library,
               tag: str) -> list[dict[str, Any]]:
    """A user question, one assistant turn per tool call with the server's real output, the answer."""
    turns: list[dict[str, Any]] = [{"role": "user", "content": question}]
    for i, (tool, args) in enumerate(calls):
        call_id = f"call_example_{tag}_{i}"
        turns += [{"role": "assistant", "content": None, "tool_calls": [{
                       "id": call_id, "type": "function",
                       "function": {"name": tool, "arguments": json.dumps(args)}}]},
                  {"role": "tool", "tool_call_id": call_id, "content": run_tool(library, tool, args)}]
    return turns + [{"role": "assistant", "content": final}]


def worked_examples(figures: dict[tuple[str, int], dict[str, float]], library: Library) -> list[dict[str, Any]]:
    """Two real exchanges: the direct path (a search naming the figure shows its line: 1 call)
    and the slow one (a search for the report, then cat to read it: 2 calls)."""
    turns: list[dict[str, Any]] = []
    for (company, year, kind), tag in zip(EXAMPLE_TASKS, "ab"):
        question, unit = question_of(company, year, kind)
        calls = ([("search", {"query": expert_query(company, year, kind)})] if tag == "a" else
                 [("search", {"query": f"{company} {year}"}), ("cat", {"path": report_name(company, year)})])
        final = f"Answer: {answer_text(answer_of(kind, figures[company, year]), unit)}"
        turns += call_turns(question, calls, final, library, tag)
    return turns


def make_task(split: str, i: int, key: tuple[str, int, str], figures: dict[tuple[str, int], dict[str, float]],
              examples: list[dict[str, Any]]) -> dict[str, Any]:
    """One task row: the system prompt, the ``examples`` turns (none for a plain row), the question.

    Its item also carries what a teacher would know, as real datasets often do: the answer, the
    report that holds it and the search an expert runs (``query``). The model never sees them; the
    grader reads the answer, a rescue hint (``training.rescue.hint``) may read the rest."""
    company, year, kind = key
    question, unit = question_of(company, year, kind)
    value = answer_of(kind, figures[company, year])
    return {"id": f"{split}-{i:03d}",
            "messages": [{"role": "system", "content": SYSTEM}, *examples, {"role": "user", "content": question}],
            "company": company, "year": year, "kind": kind, "needs": "lookup" if kind in LOOKUPS else "compute",
            "report": report_name(company, year), "query": expert_query(company, year, kind),
            "answer": value, "unit": unit,
            "answer_text": answer_text(value, unit)}


def split_tasks(rng: random.Random) -> tuple[list[tuple[str, int, str]], list[tuple[str, int, str]]]:
    """Disjoint train (96 lookups + 24 computations) and validation (48 + 12) task keys."""
    def keys(kinds: dict[str, Any]) -> list[tuple[str, int, str]]:
        out = [(c, y, k) for c in COMPANIES for y in YEARS for k in kinds if (c, y, k) not in EXAMPLE_TASKS]
        rng.shuffle(out)
        return out

    lookups, computes = keys(LOOKUPS), keys(COMPUTES)
    train, val = lookups[:96] + computes[:24], lookups[96:144] + computes[24:36]
    rng.shuffle(train)
    rng.shuffle(val)
    return train, val


def main(out: Path = HERE, plain: bool = False) -> None:
    """Write the reports and the rows (``plain``: the same tasks without the worked examples)."""
    rng = random.Random(20261202)
    figures = make_figures(rng)
    reports = out / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    for old in reports.glob("*.txt"):
        old.unlink()
    for (company, year), f in figures.items():
        (reports / report_name(company, year)).write_text(report_text(company, year, f))
    examples = [] if plain else worked_examples(figures, Library(reports))
    train, val = split_tasks(rng)
    rows = {split: [make_task(split, i, key, figures, examples) for i, key in enumerate(keys)]
            for split, keys in (("train", train), ("validation", val))}
    files = ((("train_plain", rows["train"]), ("validation_plain", rows["validation"])) if plain else
             (("train", rows["train"]), ("validation", rows["validation"]), ("train_10", rows["train"][:10])))
    for name, split_rows in files:
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in split_rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", type=Path, default=HERE, help="output folder (default: this one)")
    parser.add_argument("--plain", action="store_true", help="write the plain rows (no worked examples)")
    args = parser.parse_args()
    main(args.out, args.plain)
