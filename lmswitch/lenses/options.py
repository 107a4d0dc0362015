"""The lenses' defaults, each written once: :func:`~lmswitch.lenses.svd.svd_dimensions`,
:func:`~lmswitch.lenses.spans.highlight` and :func:`~lmswitch.lenses.meter.measure` read them in their signatures,
and the command line in its help, which is why this module imports no torch.

>>> highlight(lm, detox, text, max_span=DEFAULT_MAX_SPAN * 2)   # doctest: +SKIP
"""

from __future__ import annotations

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
