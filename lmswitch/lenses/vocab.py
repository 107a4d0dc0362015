"""Which vocabulary entries are readable words, with the tokenizers' space markers normalised.

Byte-level BPE (GPT-2, Llama 3, SmolLM) marks a leading space with ``Ġ``,
SentencePiece (Gemma, Llama 2) with ``▁``; word-level tokenizers have no marker
at all. :func:`token_words` turns every id into its surface string and whether it
starts a new word, so word lists and cross-model vocabulary matching do not care
which convention a tokenizer uses.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from lmswitch.core.hidden import prefix_ids
from lmswitch.core.models import LanguageModel, cache_dir
from lmswitch.io.atomic import write_file

SPACE_MARKERS = ("Ġ", "▁", " ")  # byte-level BPE, SentencePiece, plain space
_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")  # letters (any script), inner apostrophes/hyphens allowed


@dataclass(frozen=True)
class TokenWords:
    """Per token id: its readable surface (``""`` when not a word) and whether it starts a word."""

    surface: tuple[str, ...]
    starts_word: tuple[bool, ...]
    continues_word: tuple[bool, ...]  # no space marker and begins with a letter or digit: glued to the previous token

    def readable_ids(self, *, word_start_only: bool = True) -> list[int]:
        """Ids of readable word tokens (see :func:`is_readable_word`)."""
        return [i for i, w in enumerate(self.surface) if w and (self.starts_word[i] or not word_start_only)]


def is_readable_word(surface: str, min_chars: int = 3) -> bool:
    """A readable word: at least ``min_chars`` letters of any script, optionally joined by ``'``/``-``.

    Rejects byte pieces and broken UTF-8 (``\\ufffd``), digits, punctuation,
    whitespace, markup and mixed fragments such as ``"x2"`` or ``"</"``.
    """
    return len(surface) >= min_chars and _WORD.fullmatch(surface) is not None


@lru_cache(maxsize=8)
def token_words(tokenizer, min_chars: int = 3) -> TokenWords:
    """Surface form and word-start flag of every token id of ``tokenizer`` (cached per tokenizer).

    A token starts a word when its raw form begins with a space marker; for a
    tokenizer that has no markers at all (word-level vocabularies) every token does.
    Special tokens are never words.
    """
    n = len(tokenizer)
    raw = tokenizer.convert_ids_to_tokens(list(range(n)))
    special = set(tokenizer.all_special_ids)
    has_markers = any(isinstance(t, str) and t[:1] in SPACE_MARKERS for t in raw)
    surface, starts, continues = [], [], []
    for i, token in enumerate(raw):
        if not isinstance(token, str) or i in special:
            surface.append("")
            starts.append(False)
            continues.append(False)
            continue
        marked = token[:1] in SPACE_MARKERS
        text = tokenizer.convert_tokens_to_string([token])
        surface.append(text.strip() if is_readable_word(text.strip(), min_chars) else "")
        starts.append(marked or not has_markers)
        continues.append(has_markers and not marked and text[:1].isalnum())
    return TokenWords(surface=tuple(surface), starts_word=tuple(starts), continues_word=tuple(continues))


_FORMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {token id: its form or None}
CONTEXT = "This is"  # the neutral opening a word-start token is read after (a first position alone is a poor context)
NOT = ("'t", "’t")  # the piece after a contraction's stem ("wouldn", "hadn"): shown joined, "wouldn't"


@torch.no_grad()
def word_forms(lm: LanguageModel, ids: Sequence[int], threshold: float = 0.5) -> list[str | None]:
    """How each word-start token reads in a word list: its surface; the contraction when the model nearly always
    writes "'t" after it ("wouldn" → "wouldn't"); None for the first piece of a longer word.

    Subword vocabularies hold word-start fragments such as ``" strugg"`` or ``" allevi"`` that only occur before a
    continuation piece. A token is such a piece when the model, reading it after :data:`CONTEXT`, gives at least
    ``threshold`` probability to a next token that continues the same word (no space marker, starts with a letter or
    digit); a contraction's stem when it gives the pieces :data:`NOT` at least ``threshold``. One batched forward pass
    per call; results are cached per model, in memory and on disk under :func:`~lmswitch.core.models.cache_dir` (they
    depend only on the weights). Word-level vocabularies have no fragments, so every token reads as itself there.
    """
    tw = token_words(lm.tokenizer)
    if not any(tw.continues_word):
        return [tw.surface[int(i)] for i in ids]
    cache = _FORMS.get(lm)
    if cache is None:
        cache = _FORMS[lm] = _read_word_cache(lm)
    todo = sorted({int(i) for i in ids if int(i) not in cache})
    if todo:
        cont, nots = _piece_masks(lm, tw)
        for s in range(0, len(todo), 512):
            batch = todo[s : s + 512]
            p = _next_token_probabilities(lm, CONTEXT, batch)
            p_cont, p_not = p[:, cont.to(p.device)].sum(-1), p[:, nots.to(p.device)].sum(-1)
            for i, c, n in zip(batch, p_cont.tolist(), p_not.tolist(), strict=True):
                cache[i] = tw.surface[i] + NOT[0] if n >= threshold else None if c >= threshold else tw.surface[i]
        _write_word_cache(lm, cache)
    return [cache[int(i)] for i in ids]


def _piece_masks(lm: LanguageModel, tw: TokenWords) -> tuple[torch.Tensor, torch.Tensor]:
    """``(V,)`` bool masks: the tokens that continue a word, and the contraction pieces :data:`NOT`."""
    n = min(lm.vocab_size, len(tw.continues_word))
    cont, nots = torch.zeros(lm.vocab_size, dtype=torch.bool), torch.zeros(lm.vocab_size, dtype=torch.bool)
    cont[:n] = torch.tensor(tw.continues_word[:n])
    for piece in NOT:
        ids = lm.tokenizer.convert_tokens_to_ids(lm.tokenizer.tokenize(piece))
        if len(ids) == 1 and ids[0] is not None and ids[0] < lm.vocab_size:
            nots[ids[0]] = True
    return cont, nots


def _next_token_probabilities(lm: LanguageModel, context: str, batch: list[int]) -> torch.Tensor:
    """``(len(batch), V)``: the next-token distribution after ``context`` and each token of ``batch``."""
    ids = torch.tensor([prefix_ids(lm) + lm.tokenizer(context, add_special_tokens=False).input_ids])
    shared = lm.model(input_ids=ids.to(lm.input_device), use_cache=True).past_key_values  # the context, run once
    shared.batch_repeat_interleave(len(batch))
    logits = lm.model(input_ids=torch.tensor(batch)[:, None].to(lm.input_device), past_key_values=shared, use_cache=True).logits
    return torch.softmax(logits[:, -1].float(), dim=-1)


def _word_cache_path(lm: LanguageModel) -> Path:
    return cache_dir() / "lens" / f"word-forms-{lm.fingerprint}.json"  # (complete-words-…: booleans, one context)


def _read_word_cache(lm: LanguageModel) -> dict[int, str | None]:
    try:
        data = json.loads(_word_cache_path(lm).read_text())
        return {int(k): v for k, v in data.items() if v is None or isinstance(v, str)}
    except (OSError, ValueError, AttributeError):
        return {}  # missing or damaged: recompute


def _write_word_cache(lm: LanguageModel, cache: dict[int, str | None]) -> None:
    path = _word_cache_path(lm)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, lambda tmp: tmp.write_text(json.dumps({str(k): v for k, v in sorted(cache.items())})))
    except OSError:
        pass  # a read-only cache only costs time
