"""``arft import`` near-duplicates: judged on what varies between requests (not on the template
one agent's requests share), and every dropped row listed in the report beside the row it matched."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from arft.data.importer import import_traffic
from arft.data.near_dup import find_near_duplicates, template_words, varying_texts

SYSTEM = {"role": "system", "content": "You are the warehouse agent of Acme Logistics. " * 20}
TOOLS = [{"type": "function", "function": {
    "name": f"tool_{i}", "description": "A warehouse tool. " * 10,
    "parameters": {"type": "object", "properties": {"sku": {"type": "string"}}}}} for i in range(4)]


def request(sku: str, ticket: int, template: str = "check") -> dict[str, Any]:
    text = (f"Ticket #{ticket}: please {template} the stock level of SKU {sku} in every warehouse, "
            "reserve two units for the customer and tell me when the reservation is confirmed.")
    return {"messages": [SYSTEM, {"role": "user", "content": text}], "tools": TOOLS}


def requests(n: int = 200) -> list[tuple[str, int]]:
    rng = random.Random(0)
    skus = rng.sample(range(10_000, 99_999), n)
    return [(f"WH-{s}", 88_000 + i) for i, s in enumerate(skus)]  # tickets one apart: barely differ


def write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_one_agents_distinct_requests_are_all_kept_and_real_near_duplicates_listed(tmp_path: Path) -> None:
    distinct = [request(sku, ticket) for sku, ticket in requests()]
    (s0, t0), (s1, t1), (s2, t2) = requests()[:3]
    copies = [distinct[5], distinct[6]]  # the same start logged twice: merged, not near-duplicates
    resent = [  # the same request again: other case and spacing, a typo in the template, a comma
        {**request(s0, t0), "messages": [SYSTEM, {"role": "user", "content": distinct[0]["messages"][1]
                                                  ["content"].upper().replace(" ", "  ")}]},
        request(s1, t1, template="chek"),
        {**request(s2, t2), "messages": [SYSTEM, {"role": "user", "content": distinct[2]["messages"][1]
                                                  ["content"].replace(f"{s2} in", f"{s2}, in")}]}]
    report = import_traffic(write(tmp_path / "logs.jsonl", distinct + copies + resent), tmp_path / "out")
    assert report.lines == 205 and report.duplicates_merged == 2
    assert report.rows == 200 and report.near_duplicates_removed == 3  # all 200 distinct requests kept
    pairs = report.near_duplicate_pairs
    assert [p.kept_text for p in pairs] == [" ".join(distinct[i]["messages"][1]["content"].lower().split())
                                            for i in range(3)]
    assert all(p.ratio >= 95 and p.dropped != p.kept for p in pairs)
    assert pairs[1].compared == (f"#{t1}: {s1.lower()}", f"#{t1}: {s1.lower()}")  # the typo is template
    written = json.loads((tmp_path / "out" / "import_report.json").read_text())
    assert [p["dropped"] for p in written["near_duplicate_pairs"]] == [p.dropped for p in pairs]
    whole = find_near_duplicates([" ".join(d["messages"][1]["content"].lower().split()) for d in distinct], 95)
    assert len(whole) > 100  # what the whole-text ratio threw away before


def test_a_small_log_shares_no_words_and_a_text_of_shared_words_is_compared_whole() -> None:
    few = ["where is my order a-100? it has been a week.", "where is my order a-100? it has been a weak."]
    assert template_words(few) == set() and varying_texts(few) == few
    assert set(find_near_duplicates(varying_texts(few), 95)) == {1}
    texts = [f"status of order {i}" for i in range(20)] + ["status of order", "status of order"]
    assert varying_texts(texts)[0] == "0" and varying_texts(texts)[-1] == "status of order"
    assert find_near_duplicates(texts, 100) == {}
