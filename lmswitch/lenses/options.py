"""The lenses' defaults, each written once: :func:`~lmswitch.lenses.svd.svd_dimensions`,
:func:`~lmswitch.lenses.spans.highlight` and :func:`~lmswitch.lenses.meter.measure` read them in their signatures,
and the command line in its help, which is why this module imports no torch.

The limits of what they are asked, and their checks, are here for the same reason: the command line refuses a bad
value before it loads a model.

>>> highlight(lm, detox, text, max_span=DEFAULT_MAX_SPAN * 2)   # doctest: +SKIP
"""

from __future__ import annotations

from lmswitch.core.checks import is_number, is_whole

# the steering a highlight compares with the unsteered model (ε0 units) and the tokens per span, unless told: the
# setting with the best mean hit rate over the shipped switches on dev (eval --highlight, EVALUATION.md "Highlighting");
# a weak ε reads the switch's direction, a strong one what the steered model would rather have written instead
DEFAULT_EPS = 1.0
DEFAULT_MAX_SPAN = 8
DEFAULT_SPANS = 1  # non-overlapping spans a highlight finds
DEFAULT_DIMS = 10  # singular directions svd_dimensions lists
DEFAULT_WORDS = 20  # words at each pole of a direction (svd_dimensions), or promoted and suppressed (promoted_words)
DEFAULT_POINTS = 21  # the style meter's grid points per switch over its meter range (Switch.eps_range)
# nats: below this a meter reading's log-likelihood ratio, or a span's summed Δ, says little about the side it reads
# (the highlight examples' spans score 1.5–4.1 at ε ±1; spans of six plain sentences for detox at −1, 0.1–0.85)
WEAK_EVIDENCE_NATS = 1.0
# a highlight's weak line for one switch at one ε: the score its best span reaches on this share of the bundled neutral
# reference sentences, never under WEAK_EVIDENCE_NATS (spans.weak_line). Switches trained from a few dozen examples find
# 1-nat spans in about half of ordinary sentences; the shipped ones in under 5%. Chosen on dev among 0.75-1.0 (EVALUATION.md,
# "Highlighting: a switch's own weak line")
WEAK_QUANTILE = 0.85

# best_spans costs O(tokens × spans × span length) in Python: these keep one call on a 100,000-character text to seconds
MAX_SPAN_TOKENS = 64  # tokens in one highlighted span
MAX_SPANS = 50  # spans one highlight finds
MAX_DIMS = 100  # singular directions svd_dimensions lists
MAX_WORDS = 500  # words at each pole


def check_span_args(max_span: object, n_spans: object) -> None:
    """Refuse a span length or count :func:`~lmswitch.lenses.spans.best_spans` cannot use."""
    if not is_whole(max_span) or not 1 <= max_span <= MAX_SPAN_TOKENS:
        raise ValueError(f"max_span must be an integer from 1 to {MAX_SPAN_TOKENS} (tokens per span); got {max_span!r}")
    if not is_whole(n_spans) or not 1 <= n_spans <= MAX_SPANS:
        raise ValueError(f"n_spans must be an integer from 1 to {MAX_SPANS}; got {n_spans!r}")


def check_highlight_args(eps: object, max_span: object, n_spans: object) -> None:
    """Refuse settings :func:`~lmswitch.lenses.spans.highlight` cannot use (a caller about to read the text can check
    them first)."""
    if not is_number(eps) or eps == 0:
        raise ValueError(f"ε must be a finite non-zero number (in steps of the switch's ε0); got {eps!r}")
    check_span_args(max_span, n_spans)


def check_counts(dims: object, words: object) -> None:
    """Refuse counts of directions and words :func:`~lmswitch.lenses.svd.svd_dimensions` does not list."""
    if not is_whole(dims) or not 1 <= dims <= MAX_DIMS:
        raise ValueError(f"dims must be an integer from 1 to {MAX_DIMS}; got {dims!r}")
    if not is_whole(words) or not 1 <= words <= MAX_WORDS:
        raise ValueError(f"words must be an integer from 1 to {MAX_WORDS}; got {words!r}")
