"""Near-duplicate requests in imported traffic, judged on what varies between them.

Logged traffic of one agent shares most of its text: the system prompt and tool schemas (never
compared), and often a user-turn template too ("Ticket #88123: check stock of SKU WH-48213 and
..."), where only an id or two differ. A ratio over the whole text calls such requests
near-duplicates although each asks something else. So a request is compared on its *varying
text*: its user turns without the words that most requests share (``shared_words``: in at least
``SHARED_SHARE`` of the prompts, and in at least ``SHARED_MIN_PROMPTS`` of them, so a small log,
or two prompts that only copy each other, share nothing; a misspelt shared word counts as
shared). A request made only of shared words is compared whole.

Near-duplicates are then found with the *sorted-neighbourhood* method, which scales to 100k rows
without comparing every pair: the texts are sorted and each is compared (rapidfuzz
``fuzz.ratio``) with its next ``NEIGHBOURS`` texts in that order; then the same is done on the
reversed strings. It finds near-duplicates that share a start or an end (the same request with a
changed word, a typo, other spacing or case); two texts that differ at both ends can be missed.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple, Sequence, cast

NEIGHBOURS = 8
"""How many following texts (in sorted order) each prompt is compared with, per pass."""
SHARED_SHARE = 0.5
"""A word in at least this share of the prompts is part of what they share, not what varies."""
SHARED_MIN_PROMPTS = 10
"""... and in at least this many prompts: below that, no word is shared."""
TYPO_RATIO = 80
"""A word this close (rapidfuzz ratio) to a shared word is a misspelling of it: template too."""
TYPO_MIN_CHARS = 4
NEAR_DUP_METHOD = (f"user turns without the words at least {SHARED_SHARE:.0%} of the prompts share (when "
                   f"{SHARED_MIN_PROMPTS} or more do); sorted neighbourhood: fuzz.ratio against the next "
                   f"{NEIGHBOURS} texts in sorted order, then the same on the reversed texts")


class Match(NamedTuple):
    """An earlier, kept text that a dropped text is a near-duplicate of."""

    kept: int
    ratio: float


def user_text(prompt: list[dict[str, object]]) -> str:
    """A prompt's non-system (not system, not developer) message contents, joined, lower-cased,
    whitespace collapsed."""
    # a prompt's non-system contents are text (read_traffic checked them)
    text = " ".join(cast(str, m.get("content") or "") for m in prompt
                    if m["role"] not in ("system", "developer"))
    return " ".join(text.lower().split())


def shared_words(texts: Sequence[str]) -> set[str]:
    """The words (whitespace-separated) that at least ``SHARED_SHARE`` of ``texts`` hold, and at
    least ``SHARED_MIN_PROMPTS`` of them: the template the requests share."""
    counts = Counter(w for t in texts for w in set(t.split()))
    least = max(SHARED_MIN_PROMPTS, SHARED_SHARE * len(texts))
    return {w for w, n in counts.items() if n >= least}


def template_words(texts: Sequence[str]) -> set[str]:
    """``shared_words``, and the other words of ``texts`` that are misspellings of one (rapidfuzz
    ratio >= ``TYPO_RATIO``, at least ``TYPO_MIN_CHARS`` long, no digit: a number or an id is what
    varies, never a typo of the template)."""
    from rapidfuzz import fuzz, process

    shared = shared_words(texts)
    long_shared = [w for w in shared if len(w) >= TYPO_MIN_CHARS]
    if not long_shared:
        return shared
    candidates = {w for t in texts for w in t.split()} - shared
    typos = {w for w in candidates if len(w) >= TYPO_MIN_CHARS and not any(c.isdigit() for c in w)
             and process.extractOne(w, long_shared, scorer=fuzz.ratio, score_cutoff=TYPO_RATIO)}
    return shared | typos


def varying_texts(texts: Sequence[str]) -> list[str]:
    """Each text without the words of the template its requests share (``template_words``); the
    whole text where nothing else is left."""
    shared = template_words(texts)
    varying = [" ".join(w for w in t.split() if w not in shared) for t in texts]
    return [v or t for v, t in zip(varying, texts)]


def find_near_duplicates(texts: Sequence[str], ratio: float, window: int = NEIGHBOURS) -> dict[int, Match]:
    """The texts that are near-duplicates (``fuzz.ratio >= ratio``) of an earlier kept text, by
    index, each with the kept text it matched; by the sorted-neighbourhood method (module
    docstring). Empty texts are never compared, ``ratio >= 100`` turns the search off. The first
    of near-duplicates is kept."""
    if ratio >= 100:
        return {}
    from rapidfuzz import fuzz

    earlier: dict[int, dict[int, float]] = {}  # index -> earlier indices it is near, with the ratio
    live = [i for i, t in enumerate(texts) if t]
    for keyed in (texts, [t[::-1] for t in texts]):
        order = sorted(live, key=keyed.__getitem__)
        for a, i in enumerate(order):
            for j in order[a + 1:a + 1 + window]:
                score = fuzz.ratio(keyed[i], keyed[j], score_cutoff=ratio)
                if score:
                    earlier.setdefault(max(i, j), {})[min(i, j)] = score
    dropped: dict[int, Match] = {}
    for i in sorted(earlier):  # a text near a dropped one only is kept
        kept = [(j, r) for j, r in earlier[i].items() if j not in dropped]
        if kept:
            dropped[i] = Match(*min(kept))
    return dropped


def near_duplicates(texts: Sequence[str], ratio: float, window: int = NEIGHBOURS) -> set[int]:
    """The indices ``find_near_duplicates`` drops."""
    return set(find_near_duplicates(texts, ratio, window))
