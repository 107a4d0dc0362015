"""What a freshly trained switch learned: its words, its training document's telling spans, the meter's verdict.

Three lenses, read together right after training so a user sees at a glance
whether the switch learned a stance or only a topic:

- :func:`~lmswitch.lenses.svd.promoted_words`: the words it promotes and demotes;
- :func:`~lmswitch.lenses.spans.highlight` on the training document itself: the
  passages that read most like its positive side;
- :func:`~lmswitch.lenses.meter.measure` on the training document and, with two
  documents, on the other side's: a switch that learned the stance reads the other
  document as its opposite (negative ε); one that learned the topic does not.

Both documents were training text, so the readings are in-sample: a ✗ is a clear
warning, a ✓ is necessary but not sufficient (held-out text of each side tells more).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from lmswitch.core.hidden import READ_CHARS, EncodedText, check_text, encode_text
from lmswitch.core.models import LanguageModel
from lmswitch.core.switch import Switch
from lmswitch.lenses.meter import MeterRow, measure, reading
from lmswitch.lenses.spans import DEFAULT_EPS, Span, highlight_changes, weak_line
from lmswitch.lenses.svd import promoted_words

MAX_CHARS = READ_CHARS  # the most read of each document
CONTEXT_CHARS = 40  # characters of the document shown either side of a span


@dataclass(frozen=True)
class Learned:
    """What :func:`what_was_learned` found. :meth:`to_markdown` gives the summary the app shows."""

    switch: str
    positive_label: str
    negative_label: str
    promoted: list[str]  # words pushed up at positive ε, strongest first
    demoted: list[str]  # words pushed down at positive ε, strongest first
    text: str  # the part of the training document that was read ("" without a document)
    max_chars: int  # the most characters read of each document
    truncated: bool  # a document was longer than max_chars: only its beginning was read
    spans: list[Span]  # passages of ``text`` that read most like the positive side, strongest first (offsets into ``text``)
    own_meter: float | None  # the ε the style meter reads for the training document (None without one)
    other_meter: float | None  # the ε it reads for the other side's document (None without one)
    verdict: str  # one line per meter reading, each marked ✓ or ✗ ("" without a document)
    # the training's warnings from the switch's card (a text in a language the model reads poorly): they say how far
    # the readings below can be trusted, so they are shown above them
    cautions: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """Every field as plain data (the spans as dicts), for JSON."""
        return asdict(self)

    def to_markdown(self) -> str:
        """The summary as Markdown: any caution, the words, the spans in context, the verdict."""
        parts = [f"⚠ *{_escaped(c)} Read what follows with that in mind.*" for c in self.cautions]
        parts += [f"**Promotes** (toward *{_escaped(self.positive_label)}*): {_word_list(self.promoted)}  \n"
                  f"**Demotes** (toward *{_escaped(self.negative_label)}*): {_word_list(self.demoted)}"]
        if self.text:
            rows = [f"{i}. {_in_context(self.text, s)} ({s.score:+.2f} nats{', weak' if s.weak else ''})" for i, s in enumerate(self.spans, 1)]
            parts.append(f"**Telling passages** (they read most toward *{_escaped(self.positive_label)}* with the switch on):\n"
                         + ("\n".join(rows) or "none: no passage reads more like that side with the switch on"))
        if self.verdict:
            parts.append("**Style meter**:\n" + "\n".join(f"- {line}" for line in self.verdict.splitlines()))
        if self.truncated:
            parts.append(f"*Each document was read up to its first {self.max_chars:,} characters.*")
        return "\n\n".join(parts)


def what_was_learned(
    lm: LanguageModel,
    switch: Switch,
    document: str | None,
    other: str | None = None,
    *,
    words: int = 12,
    spans: int = 3,
    max_chars: int = MAX_CHARS,
    read: Sequence[EncodedText] = (),
) -> Learned:
    """Read a switch trained on ``document`` (its positive side) against ``other`` (its negative side, optional).

    ``document=None`` (a switch learned from labelled sentences) gives the words only.
    Each document is read up to ``max_chars`` characters (cut at a word boundary). ``read``: documents this model
    already read (the training's body pass: :attr:`~lmswitch.core.train.Done.documents`); one of them that is all of
    what would be read is taken from there, as that pass read it (in training's windows, so the readings can differ
    slightly from a pass of the lens's own), instead of being read again.

    >>> learned = what_was_learned(lm, switch, article_for, article_against)    # doctest: +SKIP
    >>> learned.verdict.splitlines()[-1]                                         # doctest: +SKIP
    '✓ Document B measures ε −6.8 (112.4 nats of evidence): the switch reads it as the opposite side (*against*).'
    """
    if not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"max_chars must be a positive integer; got {max_chars!r}")
    text, cut = _excerpt(check_text(document, "document"), max_chars) if document is not None else ("", False)
    other_text, other_cut = _excerpt(check_text(other, "other document"), max_chars) if other is not None else ("", False)
    changes = promoted_words(lm, switch, words=words)
    encoded = _encoded(lm, text, read) if text else None  # at most one body pass per document, read by both lenses
    own, found = _own_reading(lm, switch, encoded, spans) if encoded else (None, [])
    other_row = _meter(lm, switch, _encoded(lm, other_text, read)) if other_text else None
    return Learned(
        switch=switch.name,
        positive_label=switch.positive_label,
        negative_label=switch.negative_label,
        promoted=[w.word for w in changes.promoted],
        demoted=[w.word for w in changes.suppressed],
        text=text,
        max_chars=max_chars,
        truncated=cut or other_cut,
        spans=found,
        own_meter=own.best_eps_alone if own is not None else None,
        other_meter=other_row.best_eps_alone if other_row is not None else None,
        verdict=_verdict(switch, own, other_row),
        cautions=switch.card.warnings,
    )


def _encoded(lm: LanguageModel, text: str, read: Sequence[EncodedText]) -> EncodedText:
    """``text``'s head inputs: from ``read`` where it is there whole (for this model's width), else from a body pass."""
    return next((e for e in read if e.text == text and e.hidden.shape[-1] == lm.hidden_size), None) or encode_text(lm, text)


def _excerpt(text: str, max_chars: int) -> tuple[str, bool]:
    """``text`` up to ``max_chars``, cut after its last whole word; and whether it was cut."""
    if len(text) <= max_chars:
        return text, False
    head = text[:max_chars]
    cut = max((m.start() for m in re.finditer(r"\s", head)), default=0)
    return (head[:cut] if cut > max_chars // 2 else head).rstrip(), True


def _own_reading(lm: LanguageModel, switch: Switch, text: EncodedText, n: int) -> tuple[MeterRow, list[Span]]:
    """The style meter's reading of the training document, and the highlight's spans toward the positive side that do
    read more like it (summed Δ > 0), strongest first: both from one set of cached logits."""
    row, delta = reading(lm, switch, text, changes_at=DEFAULT_EPS)
    found = highlight_changes(switch, text, delta, eps=DEFAULT_EPS, n_spans=n, line=weak_line(lm, switch, DEFAULT_EPS)).spans
    return row, sorted(found, key=lambda s: -s.score)


def _meter(lm: LanguageModel, switch: Switch, text: EncodedText) -> MeterRow:
    """The style meter's reading of ``text``; a one-point curve, since only the best ε is wanted."""
    return measure(lm, switch, text, grid=[0.0]).switches[0]


def _verdict(switch: Switch, own: MeterRow | None, other: MeterRow | None) -> str:
    """One line per reading: the training document should read as the positive side, the other document as the negative."""
    if own is None:
        return ""
    positive, negative = f"*{_escaped(switch.positive_label)}*", f"*{_escaped(switch.negative_label)}*"
    name = "Document A" if other is not None else "The document"
    if _side(own) > 0:
        lines = [f"✓ {name} measures {_reading(own)}: the switch reads it as {positive}."]
    else:
        lines = [f"✗ {name} measures {_reading(own)}: the switch does not read its own training document as {positive}; "
                 "it learned little from it (train for more steps, or give more text)."]
    if other is not None and _side(other) < 0:
        lines.append(f"✓ Document B measures {_reading(other)}: the switch reads it as the opposite side ({negative}).")
    elif other is not None:
        lines.append(f"✗ Document B measures {_reading(other)}: the switch does not tell B from A; "
                     "it may have learned the topic, not the stance.")
    return "\n".join(lines)


def _side(row: MeterRow) -> int:
    """+1 or −1: the side the text reads as; 0 when the evidence is too weak to take a side."""
    if row.weak or row.best_eps_alone == 0:  # too little evidence (log-likelihood ratio vs ε 0) to take a side
        return 0
    return 1 if row.best_eps_alone > 0 else -1


def _reading(row: MeterRow) -> str:
    edge = ", the edge of its range" if row.at_bound else ""
    weak = ", too weak to take a side" if row.weak else ""
    return f"ε {row.best_eps_alone:+.1f}".replace("-", "−") + f" ({row.evidence_nats:.1f} nats of evidence{edge}{weak})"


_MARKDOWN = re.compile(r"([\\`*_\[\]<>#|~$])")  # inline emphasis, code, links, HTML, headings, tables, strikethrough, LaTeX


def _escaped(text: str) -> str:
    """``text`` shown literally in Markdown (a document may contain ``*``, ``#``, ``<`` …)."""
    return _MARKDOWN.sub(r"\\\1", " ".join(text.split()))


def _word_list(words: list[str]) -> str:
    return ", ".join(_escaped(w) for w in words) or "none"


def _in_context(text: str, span: Span) -> str:
    """“…before <b>span</b> after…”: the span in bold with up to :data:`CONTEXT_CHARS` of whole words either side.

    Bold is an HTML tag: Markdown's ``**`` does not open before punctuation glued to a word (``word**. Next**``).
    """
    before = text[max(0, span.start - CONTEXT_CHARS) : span.start]
    after = text[span.end : span.end + CONTEXT_CHARS]
    if span.start > CONTEXT_CHARS:
        before = "…" + (before.split(" ", 1)[1] if " " in before else "")
    if span.end + CONTEXT_CHARS < len(text):
        after = (after.rsplit(" ", 1)[0] if " " in after else "") + "…"
    shown = _escaped(before + "\x00" + span.text + "\x01" + after)  # the markers survive escaping and whitespace folding
    return "“" + shown.replace("\x00", "<b>").replace("\x01", "</b>") + "”"
