"""A text as tokens with character offsets and the head inputs that predict each token.

One body pass (sliding windows for texts longer than the context) gives, for
every token ``x_i`` of the text, the hidden state ``c`` that predicts it. All
lens features are then cheap head computations on these cached states:
``log P_εW(x_i | x_<i) = log softmax(E (c + M c))[x_i]`` for any steering matrix ``M``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from lmswitch.core.models import LanguageModel
from lmswitch.core.options import MAX_TEXT_CHARS as MAX_TEXT_CHARS  # defined there, torch-free, for io.documents
from lmswitch.core.parallel import gather, mine

WINDOW_TOKENS = 1024  # body-pass window for long texts (bounded memory on a CPU)
READ_CHARS = 4_000  # ~700 words: what a lens reads of a document (a body pass and a few vocabulary-wide heads per token)
HEAD_CHUNK = 256  # rows per head matmul: (256, V) float32 logits at a time
HELDOUT_BLOCK = 32  # tokens of a document per held-out unit (held-out text is whole such stretches of it)


def check_text(text: object, what: str = "text") -> str:
    """Validate a user text: a non-empty, non-binary string of reasonable size."""
    if not isinstance(text, str):
        raise ValueError(f"the {what} is a {type(text).__name__}, not a string")
    if "\x00" in text:
        raise ValueError(f"the {what} contains NUL bytes; is it binary data?")
    if not text.strip():
        raise ValueError(f"the {what} is empty or whitespace only; give some text")
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(f"the {what} has {len(text):,} characters; the limit is {MAX_TEXT_CHARS:,}; split it into parts")
    return text


def windows(ids: list[int], length: int, overlap: int) -> list[tuple[list[int], int]]:
    """Split a long token list into windows of ``length`` with ``overlap`` tokens of context.

    Returns ``(window ids, index of the first position scored in it)`` so that every
    position predicts exactly once across the windows.
    """
    if len(ids) <= length:
        return [(ids, 0)]
    out, start, stride = [], 0, length - overlap
    while True:
        window = ids[start : start + length]
        out.append((window, 0 if start == 0 else overlap - 1))
        if start + length >= len(ids):
            return out
        start += stride


class ShortText(ValueError):
    """A text too short to learn from (under 2 tokens): its index among the texts given, the text, and its tokens."""

    def __init__(self, index: int, text: str, tokens: int) -> None:
        self.index, self.text, self.tokens = index, text, tokens
        super().__init__(self.says(f"text #{index + 1}"))

    def says(self, name: str) -> str:
        """The refusal, the text called ``name`` (a caller knows which side it is on)."""
        return (f"{name} ({self.text[:40]!r}) has {self.tokens} token(s); a text needs at least 2 to learn from: remove it, "
                "or join it to the text before it")


@dataclass
class EncodedText:
    """A text, its tokens, and the head input predicting each token."""

    text: str
    ids: list[int]  # the text's tokens (any prompt or BOS excluded)
    offsets: list[tuple[int, int]]  # character span of each token in ``text``
    hidden: torch.Tensor  # (n, d): row i is the head input that predicts ids[i]
    scored: torch.Tensor  # (n,) bool: False for a first token with nothing before it
    windows: int  # body passes used (> 1 for texts longer than the window)

    @property
    def n_tokens(self) -> int:
        return len(self.ids)

    def check_scored(self, reader: str) -> None:
        """Refuse a text with no token to score: a single token (nothing comes before it), or none."""
        if not bool(self.scored.any()):
            what = "has no tokens" if not self.ids else "is a single token"
            raise ValueError(f"the text {what}; {reader} needs at least two (each token is read given the ones before it)")

    def boundaries(self) -> list[int]:
        """Non-decreasing start offsets with ``boundaries[0] == 0`` and a final ``len(text)``.

        Piece ``i`` is ``text[b[i]:b[i + 1]]``: the pieces tile the text exactly, with
        no character lost or doubled, even where several byte-level tokens share
        one character (the later ones get an empty piece).
        """
        b, last = [], 0
        for start, _ in self.offsets:
            last = max(last, min(start, len(self.text)))
            b.append(last)
        if b:
            b[0] = 0
        return b + [len(self.text)]

    def pieces(self) -> list[str]:
        b = self.boundaries()
        return [self.text[b[i] : b[i + 1]] for i in range(self.n_tokens)]


def prefix_ids(lm: LanguageModel, prompt: str | None = None, chat: bool = False) -> list[int]:
    """Token ids that come before a scored text: the prompt (optionally chat-templated), or else
    the tokenizer's own start tokens (BOS for Llama/Gemma; none for GPT-2-style tokenizers)."""
    tok = lm.tokenizer
    if prompt:
        if chat:
            prompt = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
        return tok(prompt, add_special_tokens=not chat).input_ids
    with_special = tok("a", add_special_tokens=True).input_ids
    plain = tok("a", add_special_tokens=False).input_ids
    for k in range(len(with_special) - len(plain) + 1):
        if with_special[k : k + len(plain)] == plain:
            return with_special[:k]
    return []


def _offsets(lm: LanguageModel, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    tok = lm.tokenizer
    if getattr(tok, "is_fast", False):
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc.input_ids), [tuple(o) for o in enc.offset_mapping]
    # slow tokenizers: offsets from incremental decoding, valid when decoding gives the text back
    ids = tok(text, add_special_tokens=False).input_ids
    if tok.decode(ids) != text:
        raise ValueError(f"{type(tok).__name__} gives no character offsets; load the model with a fast tokenizer")
    offsets, prev = [], 0
    for i in range(len(ids)):
        end = len(tok.decode(ids[: i + 1]))
        offsets.append((prev, end))
        prev = end
    return ids, offsets


@torch.no_grad()
def encode_text(lm: LanguageModel, text: str, *, prompt: str | None = None, chat: bool = False) -> EncodedText:
    """Tokenize ``text`` (after an optional ``prompt``) and compute the head input predicting each token.

    Texts longer than the window are scored in overlapping windows, so every token
    keeps at least ``WINDOW_TOKENS // 4`` tokens of context.
    """
    check_text(text)
    ids, offsets = _offsets(lm, text)
    if not ids:
        raise ValueError("the text produced no tokens")
    prefix = prefix_ids(lm, prompt, chat)
    seq = prefix + ids
    length = min(lm.context_length, WINDOW_TOKENS)
    d = lm.hidden_size
    rows: list[torch.Tensor] = []
    parts = windows(seq, length, length // 4)
    for window, first in parts:
        h = lm.final_hidden(torch.tensor([window]))[0]  # (len(window), d)
        rows.append(h[first : len(window) - 1].float())
    hidden_seq = torch.cat(rows) if rows else torch.zeros(0, d)  # row j predicts seq[j + 1]
    # token i of the text is seq[len(prefix) + i], predicted by row len(prefix) + i - 1
    first_pred = len(prefix) - 1
    hidden = torch.zeros(len(ids), d, device=hidden_seq.device)
    scored = torch.zeros(len(ids), dtype=torch.bool)
    if first_pred >= 0:
        hidden[:] = hidden_seq[first_pred : first_pred + len(ids)]
        scored[:] = True
    else:
        hidden[1:] = hidden_seq[: len(ids) - 1]
        scored[1:] = True
    return EncodedText(text=text, ids=ids, offsets=offsets, hidden=hidden, scored=scored, windows=len(parts))


def encoded_continuation(lm: LanguageModel, text: str, ids: Sequence[int], hidden: torch.Tensor) -> EncodedText | None:
    """The :class:`EncodedText` of a generated continuation from the head inputs its decode recorded (row ``i`` of
    ``hidden`` predicts ``ids[i]``), with no body pass; None when ``text`` does not tokenize back to ``ids`` (rare: then
    :func:`encode_text` it)."""
    retokenized, offsets = _offsets(lm, text)
    if retokenized != list(ids) or not ids:
        return None
    return EncodedText(text=text, ids=list(ids), offsets=offsets, hidden=hidden.float(), scored=torch.ones(len(ids), dtype=torch.bool),
                       windows=0)


@torch.no_grad()
def encode_continuations(lm: LanguageModel, texts: Sequence[str], *, prompt: str | Sequence[str],
                         chat: bool = False) -> list[EncodedText]:
    """:func:`encode_text` of several continuations, of one ``prompt`` or of one prompt each (e.g. the outputs of
    concurrent users' requests); those that fit one window share body passes (right-padded, at most
    :data:`PADDING_SHARE` padding), so scoring a steered text and its unsteered twin costs about one pass, not two."""
    prompts = [prompt] * len(texts) if isinstance(prompt, str) else list(prompt)
    if len(prompts) != len(texts):
        raise ValueError(f"{len(prompts)} prompts for {len(texts)} texts; give one prompt, or one per text")
    prefixes = {p: prefix_ids(lm, p, chat) for p in set(prompts)}
    tokenized = [_offsets(lm, check_text(text)) for text in texts]
    length = min(lm.context_length, WINDOW_TOKENS)
    short = [(prefixes[p] + ids, i) for i, (p, (ids, _)) in enumerate(zip(prompts, tokenized, strict=True))
             if prefixes[p] and ids and len(prefixes[p]) + len(ids) <= length]
    out = {i: encode_text(lm, text, prompt=p, chat=chat)
           for i, (p, text) in enumerate(zip(prompts, texts, strict=True)) if i not in {i for _, i in short}}
    for batch in _batches(sorted(short, key=lambda piece: len(piece[0])), budget=4096):
        h = _padded_pass(lm, [seq for seq, _ in batch])
        for r, (_, i) in enumerate(batch):
            ids, offsets = tokenized[i]
            first = len(prefixes[prompts[i]]) - 1  # row first + j predicts the text's token j
            out[i] = EncodedText(text=texts[i], ids=ids, offsets=offsets, hidden=h[r, first : first + len(ids)].float(),
                                 scored=torch.ones(len(ids), dtype=torch.bool), windows=1)
    return [out[i] for i in range(len(texts))]


def _padded_pass(lm: LanguageModel, seqs: list[list[int]]) -> torch.Tensor:
    """One body pass over token sequences, right-padded to the longest: head inputs ``(len(seqs), width, d)``."""
    ids = torch.full((len(seqs), max(map(len, seqs))), lm.tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, seq in enumerate(seqs):
        ids[r, : len(seq)], mask[r, : len(seq)] = torch.tensor(seq), 1
    return lm.final_hidden(ids, mask.to(lm.input_device))


@torch.no_grad()
def target_logprobs(lm: LanguageModel, hidden: torch.Tensor, targets: torch.Tensor, matrices: list[torch.Tensor | None]) -> torch.Tensor:
    """``log P(targets[i] | hidden[i])`` under each steering matrix, ``(len(matrices), n)`` float64.

    ``None`` is the unsteered head; a (d, d) matrix ``M`` steers ``c → c + M c``.
    """
    out = torch.zeros(len(matrices), len(targets), dtype=torch.float64)
    targets = targets.to(hidden.device)
    for s in range(0, len(targets), HEAD_CHUNK):
        h = hidden[s : s + HEAD_CHUNK]
        y = targets[s : s + HEAD_CHUNK, None]
        for k, M in enumerate(matrices):
            logp = lm.head_logprobs(h, M)
            out[k, s : s + len(y)] = logp.gather(1, y)[:, 0].double().cpu()
    return out


@dataclass
class TokenStates:
    """Head inputs of many texts: one row per predicted token (training data, reference contexts)."""

    hidden: torch.Tensor  # (N, d) head inputs c_t, predicting targets[t]
    targets: torch.Tensor  # (N,) next-token ids
    labels: torch.Tensor  # (N,) label of the text each token belongs to
    unit: torch.Tensor  # (N,) id of the held-out unit (a text, or a block of one document)
    texts: dict[int, EncodedText] = field(default_factory=dict)  # the texts asked for (``keep``), by index, as read here


PADDING_SHARE = 1 / 3  # at most this share of a body pass's positions are padding


def _batches(pieces: list, budget: int) -> list[list]:
    """Consecutive pieces (sorted by length) grouped so a body pass holds at most ``budget`` positions, padding
    included, and at most :data:`PADDING_SHARE` of them padding: padded positions cost as much as real ones, so a
    document's last short window does not stretch thirty short texts to its width."""
    out, i = [], 0
    while i < len(pieces):
        j, real = i, 0
        while j < len(pieces):
            width = len(pieces[j][0])
            padded = (j - i + 1) * width
            if j > i and (padded > budget or padded - (real + width) > PADDING_SHARE * padded):
                break
            real += width
            j += 1
        out.append(pieces[i:j])
        i = j
    return out


def _encode_batch(lm: LanguageModel, batch: list, labels: list[float], block: int) -> tuple[list, list, list, list]:
    """One body pass: per piece, its head inputs, next-token targets, labels and held-out unit ids (on the CPU)."""
    h = _padded_pass(lm, [p[0] for p in batch])  # (b, width, d)
    hidden, targets, lab, unit = [], [], [], []
    for r, (w, first, t, start) in enumerate(batch):
        n = len(w) - 1  # positions 0..n-1 predict tokens 1..n
        hidden.append(h[r, first:n].float().cpu())
        targets.append(torch.tensor(w[first + 1 : n + 1]))
        lab.append(torch.full((n - first,), labels[t]))
        pos = torch.arange(start, start + n - first)
        unit.append(t * 1_000_000 + pos // block)
    return hidden, targets, lab, unit


def encode_texts(lm: LanguageModel, texts: list[str], labels: list[float], chunk_tokens: int, block: int = HELDOUT_BLOCK,
                 keep: Sequence[int] = ()) -> TokenStates:
    """One body pass over all texts (batched by length) → cached head inputs per scored token; ``keep``: the texts (by
    index) also returned whole, as :class:`EncodedText`, so a lens can read them without a body pass of its own (see
    :func:`_kept` for how that reading differs from :func:`encode_text`'s)."""
    tok = lm.tokenizer
    length = min(chunk_tokens, lm.context_length)
    overlap = min(64, length // 4)
    # (ids, first scored target, text index, position in the text of the first scored target): positions follow the
    # document, whatever order the windows are processed in, so held-out token blocks are contiguous stretches of it
    pieces: list[tuple[list[int], int, int, int]] = []
    for i, text in enumerate(texts):
        ids = tok(text, add_special_tokens=False).input_ids
        if len(ids) < 2:
            raise ShortText(i, text, len(ids))
        start = 0
        for w, first in windows(ids, length, overlap):
            pieces.append((w, first, i, start))
            start += len(w) - 1 - first
    pieces.sort(key=lambda p: len(p[0]))
    batches = _batches(pieces, budget=4096)
    # under `accelerate launch` each process encodes its share of the batches; all get every batch back, in order
    encoded = gather([(k, _encode_batch(lm, batch, labels, block)) for k, batch in mine(batches)], len(batches))
    hidden, targets, lab, unit = ([x for e in encoded for x in e[part]] for part in range(4))
    head_device = lm.head_device
    return TokenStates(
        hidden=torch.cat(hidden).to(head_device),
        targets=torch.cat(targets).to(head_device),
        labels=torch.cat(lab).float().to(head_device),
        unit=torch.cat(unit),
        texts=_kept(lm, texts, keep, [(piece, rows) for batch, e in zip(batches, encoded, strict=True)
                                      for piece, rows in zip(batch, e[0], strict=True)]),
    )


def _kept(lm: LanguageModel, texts: list[str], keep: Sequence[int], pieces: list[tuple[tuple, torch.Tensor]]) -> dict[int, EncodedText]:
    """The texts ``keep`` whole, from the rows of their windows (``pieces``: ``((ids, first, text index, start),
    rows)``): :func:`encode_text`'s form (the first token unscored), read as training reads, in windows of its
    ``chunk_tokens`` with less context after the first, in a padded batch. None is kept for a tokenizer with start
    tokens (BOS: :func:`encode_text` reads after them, training does not), and no text whose tokens have no
    character offsets (a slow tokenizer's that do not decode back)."""
    out: dict[int, EncodedText] = {}
    if keep and prefix_ids(lm):
        return out
    for t in keep:
        try:
            ids, offsets = _offsets(lm, texts[t])
        except ValueError:
            continue
        mine = sorted((p for p in pieces if p[0][2] == t), key=lambda p: p[0][3])  # in document order
        rows = torch.cat([r for _, r in mine]).to(lm.head_device)  # row j predicts token j + 1
        if len(rows) == len(ids) - 1:
            out[t] = _whole(texts[t], ids, offsets, rows, len(mine))
    return out


def _whole(text: str, ids: list[int], offsets: list[tuple[int, int]], rows: torch.Tensor, windows: int) -> EncodedText:
    scored = torch.ones(len(ids), dtype=torch.bool)
    scored[0] = False
    return EncodedText(text=text, ids=ids, offsets=offsets, hidden=torch.cat([rows.new_zeros(1, rows.shape[1]), rows]),
                       scored=scored, windows=windows)
