"""The finance_lookup tool server: `search`, `list` and `cat` over the company reports, over HTTP.

It speaks the hosted Agent RFT tool-endpoint contract: each tool is a URL that takes a POST
``{"type": "function_call", "id", "call_id", "name", "arguments": "<json string>", "trace_id",
"item"}`` and answers ``{"type": "function_call_output", "call_id", "id", "output"}``. A bad call
(unknown report, missing argument) is a 4xx whose body the model sees, so it can correct itself.

    python server.py --port 8765          # serves http://127.0.0.1:8765/{search,list,cat}

Every call's ``trace_id`` is kept (``GET /traces/{trace_id}`` lists the calls of one rollout):
the talk's point that every tool call reaching *your* system can be tied to its trajectory.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

REPORTS = Path(__file__).resolve().parent / "reports"
DEFAULT_PORT = 8765
MAX_HITS = 3
"""Most reports one search returns (each with its best matching lines)."""
LINES_PER_HIT = 2
STOPWORDS = frozenset(
    "a an and as at by compared did for from grow had how in is it many much of on percent "
    "percentage s than the to was were what which with".split())


def words(text: str) -> list[str]:
    """Lower-case alphanumeric words (``Northwind Traders' 2022`` -> northwind, traders, 2022)."""
    return re.findall(r"[a-z0-9]+", text.lower())


def _matches(term: str, line_words: set[str]) -> bool:
    # prefix match both ways, so "employee" finds "employees" and "revenues" finds "revenue"
    return any(w.startswith(term) or (len(w) >= 4 and term.startswith(w)) for w in line_words)


class UnknownReport(LookupError):
    """``cat`` of a file that is not there (the server's 404)."""


class Library:
    """The reports of one folder (``<company_slug>_<year>.txt``), read once, searched in memory."""

    def __init__(self, folder: Path = REPORTS) -> None:
        files = sorted(folder.glob("*.txt"))
        if not files:
            raise FileNotFoundError(f"no reports (*.txt) in {folder}; run make_data.py to generate them")
        self.texts = {f.name: f.read_text() for f in files}

    def search(self, query: str) -> str:
        """The reports that best match the company, year and metric words of ``query`` (ties: up
        to ``MAX_HITS``), each with its lines holding the query's metric words."""
        terms = [t for t in dict.fromkeys(words(query)) if t not in STOPWORDS]
        if not terms:
            raise ValueError("the query has no search words; name the company, the year and the figure")
        scores = {name: self._score(name, terms) for name in self.texts}
        top = max(scores.values())
        if not any(top):
            return f"No report matches {query!r}. Search for the company name and the year, e.g. 'Contoso 2021'."
        hits = [name for name in self.texts if scores[name] == top][:MAX_HITS]
        return "\n".join(f"{name}: {' | '.join(self._best_lines(name, terms))}" for name in hits)

    def _score(self, name: str, terms: list[str]) -> tuple[int, int, int]:
        """(company words matched, year matched, other words found in the text): compared in order."""
        stem = name.removesuffix(".txt").split("_")
        company, year = set(stem[:-1]), stem[-1]
        text_words = set(words(self.texts[name]))
        rest = [t for t in terms if t not in company and t != year]
        return (sum(t in company for t in terms), int(year in terms), sum(_matches(t, text_words) for t in rest))

    def _best_lines(self, name: str, terms: list[str]) -> list[str]:
        """The report's lines with the query's metric words (not the company or year), else its title."""
        stem = set(name.removesuffix(".txt").split("_"))
        metric_terms = [t for t in terms if t not in stem]
        title, *body = self.texts[name].strip().splitlines()
        scored = [(sum(_matches(t, set(words(line))) for t in metric_terms), i, line) for i, line in enumerate(body)]
        best = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))[:LINES_PER_HIT]
        return [line for _, _, line in sorted(best, key=lambda s: s[1])] or [title]

    def list(self, company: str = "") -> str:
        """Report file names, only those whose name contains every word of ``company`` if given."""
        wanted = words(company)
        names = [n for n in self.texts if all(w in n for w in wanted)]
        return "\n".join(names) if names else f"No report file name contains {company!r}."

    def cat(self, path: str) -> str:
        """The full text of one report (``reports/x_2021.txt``, ``x_2021.txt`` or ``x_2021``)."""
        name = Path(path.strip()).name
        name = name if name.endswith(".txt") else name + ".txt"
        if name not in self.texts:
            raise UnknownReport(f"no report named {path!r}; use search (company and year) to find its file name")
        return self.texts[name]


class FunctionCall(BaseModel):
    """The hosted contract's request body (extra keys tolerated: the contract may grow)."""

    type: str = "function_call"
    id: str
    call_id: str
    name: str
    arguments: str
    trace_id: str | None = None
    item: dict[str, Any] | None = None


def run_tool(library: Library, tool: str, arguments: dict[str, Any]) -> str:
    """The output of one call; UnknownReport (404) or KeyError/ValueError/TypeError (400) when bad."""
    if tool == "search":
        return library.search(str(arguments["query"]))
    if tool == "list":
        return library.list(str(arguments.get("company", "")))
    return library.cat(str(arguments["path"]))


def create_app(folder: Path = REPORTS) -> FastAPI:
    """The app: POST /search, /list, /cat (hosted contract), GET /health, GET /traces/{trace_id}."""
    library = Library(folder)
    calls_by_trace: dict[str, list[dict[str, str]]] = defaultdict(list)
    app = FastAPI(title="finance_lookup tools")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"ok": True, "service": "finance_lookup", "reports": len(library.texts)}

    @app.get("/traces/{trace_id}")
    async def trace(trace_id: str) -> list[dict[str, str]]:
        return calls_by_trace.get(trace_id, [])

    @app.post("/{tool}")
    async def call(tool: str, body: FunctionCall) -> dict[str, Any]:
        if tool not in ("search", "list", "cat"):
            raise HTTPException(404, f"no tool {tool!r}; the tools are search, list and cat")
        if body.trace_id:
            calls_by_trace[body.trace_id].append({"name": tool, "arguments": body.arguments})
        try:
            arguments = json.loads(body.arguments or "{}")
            if not isinstance(arguments, dict):
                raise TypeError("arguments must be a JSON object")
            output = run_tool(library, tool, arguments)
        except UnknownReport as e:
            raise HTTPException(404, str(e)) from None
        except KeyError as e:
            raise HTTPException(400, f"{tool} needs the argument {e}") from None
        except (ValueError, TypeError) as e:
            raise HTTPException(400, f"bad arguments for {tool}: {e}") from None
        return {"type": "function_call_output", "call_id": body.call_id, "id": body.id, "output": output}

    return app


def main() -> None:
    p = argparse.ArgumentParser(description="Serve the finance_lookup tools on 127.0.0.1.")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--reports", type=Path, default=REPORTS, help="folder of report .txt files")
    args = p.parse_args()
    import uvicorn

    uvicorn.run(create_app(args.reports), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
