"""The finance_lookup grader: the answer's number against the report's, with partial credit.

A hosted ``python`` grader (``def grade(sample, item)``), run in arft's sandbox; self-contained
(standard library only). The graded number is the first one after the last ``Answer:`` (the
format the system prompt asks for), else the first number of the reply; bare years (2021) are
never taken for the answer. It is read in the item's unit (``usd_millions``, ``percent``,
``employees``) using its scale word: "$0.41 billion" and "$412,500,000" are both 412.5 $ millions.

    value credit  1.0 within 0.5 % relative (rounding), falling linearly from 0.7 at 0.5 % to
                  0.2 at 5 %, 0 beyond; 0.5 for the right digits at the wrong scale
                  ("412.5 billion" for $412.5 million); 0 when the reply has no number
    unit credit   the reply states the right kind of unit ("million" for money, "%" for a
                  percentage, no money or % for a headcount)
    score         value x (0.8 + 0.2 x unit): the reference answer scores 1, an empty reply 0;
                  divided by the number of different figures in a reply without 'Answer:'
                  (pasting a whole report must not pay as much as committing to one figure)

``passed`` (what the benchmark calls accuracy) is a value within 0.5 %.
"""

from __future__ import annotations

import re
from typing import Any

NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-\u2212])?\s?\$?\s?(?P<sign2>[-\u2212])?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
    r"\s?(?P<scale>%|percent(?:age points?)?|per cent|billions?|bn|millions?|mn|m|thousands?|k|"
    r"employees?|people|staff)?(?![A-Za-z])", re.IGNORECASE)
DECREASE = re.compile(r"\b(decrease|decreased|decline|declined|fell|fall|drop|dropped|down|lower|shr[iau]nk)\b",
                      re.IGNORECASE)
MONEY_SCALE = {"billion": 1000.0, "bn": 1000.0, "million": 1.0, "mn": 1.0, "m": 1.0,
               "thousand": 0.001, "k": 0.001}
FULL, TOLERANCE, NEAR, FAR = 0.005, 0.05, 0.7, 0.2


def candidates(text: str) -> list[re.Match[str]]:
    """The numbers of ``text`` that can be an answer (bare years such as 2021 are left out)."""
    out = []
    for m in NUMBER.finditer(text):
        bare = "," not in m["num"] and "." not in m["num"] and not m["scale"]
        if bare and 1990 <= int(m["num"]) <= 2039:
            continue
        out.append(m)
    return out


def answer_number(text: str) -> tuple[re.Match[str] | None, bool]:
    """(the first number after the last 'Answer:', True), else (the reply's first number, False)."""
    parts = re.split(r"answer\s*:", text, flags=re.IGNORECASE)
    if len(parts) > 1:
        after = candidates(parts[-1])
        if after:
            return after[0], True
    found = candidates(text)
    return (found[0] if found else None), False


def read_value(m: re.Match[str], unit: str) -> tuple[float, float, bool]:
    """(value in ``unit``, the raw number, whether the stated unit is the right kind)."""
    raw = float(m["num"].replace(",", ""))
    if m["sign"] or m["sign2"]:
        raw = -raw
    scale = (m["scale"] or "").lower().removesuffix("s")
    if unit == "usd_millions":
        if scale in MONEY_SCALE:
            return raw * MONEY_SCALE[scale], raw, True
        # a bare number: raw dollars when large, else taken as millions (unit not stated)
        return (raw / 1e6 if abs(raw) >= 1e5 else raw), raw, False
    if unit == "percent":
        return raw, raw, scale.startswith(("%", "percent", "per cent"))
    thousands = 1000.0 if scale in ("thousand", "k") else 1.0
    return raw * thousands, raw, scale not in MONEY_SCALE or scale in ("thousand", "k")


def closeness(value: float, reference: float) -> float:
    """1 within 0.5 % relative, then linearly 0.7 -> 0.2 up to 5 %, then 0."""
    rel = abs(value - reference) / max(abs(reference), 1e-9)
    if rel <= FULL:
        return 1.0
    if rel <= TOLERANCE:
        return NEAR - (NEAR - FAR) * (rel - FULL) / (TOLERANCE - FULL)
    return 0.0


def grade(sample: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    text = sample.get("output_text") or ""
    reference, unit = float(item["answer"]), item["unit"]
    m, committed = answer_number(text)
    if m is None:
        return {"score": 0.0, "sub_scores": {"value": 0.0, "unit": 0.0}, "flags": ["no_number"], "passed": False}
    value, raw, unit_ok = read_value(m, unit)
    if reference < 0 < value and DECREASE.search(text):
        value, raw = -value, -raw  # "fell by $1.1 million" answers a change of -1.1
    credit, flags = closeness(value, reference), []
    if credit == 0.0 and closeness(raw, reference) == 1.0:
        credit, unit_ok, flags = 0.5, False, ["wrong_scale"]
    score = credit * (0.8 + 0.2 * unit_ok)
    distinct = {round(read_value(c, unit)[0], 6) for c in candidates(text)}
    if not committed and len(distinct) > 1:  # no 'Answer:' and several figures: a hedge
        score, flags = score / len(distinct), [*flags, "several_numbers"]
    return {"score": round(score, 4), "sub_scores": {"value": round(credit, 4), "unit": float(unit_ok)},
            "flags": flags, "passed": credit == 1.0}
