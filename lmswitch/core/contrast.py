"""Self-contrast negatives: the model's own continuations from the openings of a document's sentences.

Trained against its own text, a switch from one document learns what the document
does differently from the model on the same openings (its stance, its style),
not what it is about: the topic words are in both sides and cancel out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from lmswitch.core.generate import generate_tokens
from lmswitch.core.models import LanguageModel
from lmswitch.core.options import SamplingOptions

MIN_WORDS = 6  # sentences shorter than this give no opening
OPENING_SHARE = 0.4  # an opening is this share of the sentence's words …
OPENING_WORDS = (3, 10)  # … within these bounds
MAX_OPENINGS = 32  # at most this many continuations (spread over the texts)
MAX_NEW_TOKENS = 16  # 24 before: meter accuracy on the dev stance topics 56% (24) vs 60% (16), noise-level; 0.2–0.6 s slower
_SENTENCE = re.compile(r"(?<=[.!?])[\"”')\]]*\s+|\n+")


def sentences(text: str) -> list[str]:
    """``text`` split into sentences (after . ! ? and any closing quote or bracket, and at line breaks), as written."""
    return _SENTENCE.split(text)


def sentence_openings(texts: Sequence[str], limit: int = MAX_OPENINGS) -> list[tuple[str, int]]:
    """(opening, number of words after it) for sentences of at least :data:`MIN_WORDS` words, evenly spread, at most ``limit``."""
    out = []
    for text in texts:
        for sentence in sentences(text):
            words = sentence.split()
            if len(words) < MIN_WORDS:
                continue
            k = min(max(round(OPENING_SHARE * len(words)), OPENING_WORDS[0]), OPENING_WORDS[1])
            out.append((" ".join(words[:k]), len(words) - k))
    if len(out) > limit:
        step = len(out) / limit
        out = [out[int(i * step)] for i in range(limit)]
    return out


def self_contrast(lm: LanguageModel, texts: Sequence[str], *, seed: int = 0, limit: int = MAX_OPENINGS) -> list[str]:
    """The model's own continuations (sampled, unsteered) of the texts' sentence openings, each cut to its sentence's length.

    Raises ValueError when no sentence is long enough to give an opening.
    """
    openings = sentence_openings(texts, limit)
    if not openings:
        raise ValueError(f"self-contrast needs sentences of at least {MIN_WORDS} words to take openings from; "
                         "the text has none (give a document of full sentences, or train without self-contrast)")
    new_tokens = min(MAX_NEW_TOKENS, max(2 * rest for _, rest in openings) + 2)
    opts = SamplingOptions(max_new_tokens=new_tokens)
    prompts = [opening for opening, _ in openings]
    out = generate_tokens(lm, prompts, [[]] * len(prompts), [seed + i for i in range(len(prompts))], opts)
    texts_out = []
    for (opening, rest), continuation in zip(openings, out.texts, strict=True):
        words = continuation.split()[: max(rest, 1)]
        texts_out.append(" ".join([opening, *words]))
    return texts_out
