"""Guided decoding: steer, and every few tokens keep the candidate continuation the switch's judge likes best.

A switch pushes every token a little; at strengths where the push is enough to make a text read positive, the push
has turned into a bonus on a few words and the text loops (EVALUATION.md). Guided decoding keeps the push mild and
adds a choice: each row is decoded :data:`~lmswitch.core.options.GUIDE_TOKENS` tokens at a time as ``guide``
candidates (other seeds), and the candidate whose text so far the row's switch judges
(:mod:`lmswitch.core.judge`) place furthest the way its ε points is kept; a candidate that repeats a word ("great
great") or a three-word phrase is kept only when every candidate does. Rows whose switches are all at ε 0 are decoded plainly, so ε = 0 is
the unsteered model exactly.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import replace

import torch
from transformers import DynamicCache

from lmswitch.core.generate import Generated, Prompt, _decode, candidate_seed, encode_prompts, finished_text, padded, shared_prompts
from lmswitch.core.hidden import _padded_pass
from lmswitch.core.judge import guide_scores
from lmswitch.core.models import LanguageModel
from lmswitch.core.options import GUIDE_TOKENS, SamplingOptions
from lmswitch.core.steering import Setting

_WORDS = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")


def loops(text: str, repeats: int) -> bool:  # (the evaluation marks a sample looping with repeats = 3)
    """Whether ``text`` has one word ``repeats`` times in a row, ignoring case and punctuation ("cramped, cramped")."""
    words = [w.lower() for w in _WORDS.findall(text)]
    run = 1
    for a, b in zip(words, words[1:], strict=False):
        run = run + 1 if a == b else 1
        if run >= repeats:
            return True
    return False


def judges_of(setting: Setting) -> list[tuple[torch.Tensor, float]]:
    """The (judge, ε) pairs that guide a row; raises when a steering switch has no judge."""
    out = []
    for switch, eps in setting:
        if eps and switch.judge is None:
            composed = (" (a sum of switches has none: give them side by side, [(a, 2), (b, 2)], and each judge guides)"
                        if "sum_of" in switch.card else "")
            raise ValueError(f"switch '{switch.name}' has no judge, so it cannot guide decoding{composed}; switches trained "
                             "from two sides (positive and negative texts) have one: train it again, or set guide to 1")
        if eps:
            out.append((switch.judge, float(eps)))
    return out


def _rows(gen: Generated) -> tuple[list[list[int]], list[list[int]]]:
    """Each row's prompt ids (padding dropped) and new ids (up to and including EOS)."""
    prompts = [ids[mask.bool()].tolist() for ids, mask in zip(gen.prompt_ids, gen.prompt_mask, strict=True)]
    return prompts, [ids[mask.bool()].tolist() for ids, mask in zip(gen.new_ids, gen.new_mask, strict=True)]


@torch.no_grad()
def _mean_continuation(lm: LanguageModel, rows: list[list[int]], starts: list[int]) -> torch.Tensor:
    """Mean head input over each row's tokens from ``starts[r]`` on (its continuation), ``(len(rows), d)``."""
    h = _padded_pass(lm, rows).float().cpu()
    keep = torch.zeros(h.shape[:2])
    for r, (row, start) in enumerate(zip(rows, starts, strict=True)):
        keep[r, start : len(row)] = 1
    return (h * keep[..., None]).sum(1) / keep.sum(1, keepdim=True).clamp_min(1)


def guided_tokens(lm: LanguageModel, prompts: Sequence[Prompt], settings: Sequence[Setting], seeds: Sequence[int],
                  opts: SamplingOptions, stop: threading.Event | None = None) -> Generated:
    """:func:`~lmswitch.core.generate.generate_tokens` with ``opts.guide`` = n > 1 (see the module's docstring)."""
    guides = [judges_of(s) for s in settings]
    plain_opts = replace(opts, guide=1)
    plain = [i for i, g in enumerate(guides) if not g]
    prompt_ids: list[list[int]] = [[] for _ in prompts]
    new_ids: list[list[int]] = [[] for _ in prompts]
    if plain:
        gen, _ = _decode(lm, [prompts[i] for i in plain], [settings[i] for i in plain], [seeds[i] for i in plain], plain_opts,
                         None, stop, None)
        for i, p, x in zip(plain, *_rows(gen), strict=True):
            prompt_ids[i], new_ids[i] = p, x
    guided = [i for i, g in enumerate(guides) if g]
    if guided:
        ids, mask = encode_prompts(lm, [prompts[i] for i in guided], opts)
        for i, row, keep in zip(guided, ids.tolist(), mask.tolist(), strict=True):
            prompt_ids[i] = [t for t, m in zip(row, keep, strict=True) if m]
        _guide(lm, guided, prompt_ids, new_ids, [settings[i] for i in guided], [seeds[i] for i in guided], guides, opts, stop)
    pad = lm.tokenizer.pad_token_id
    prompt_ids_t, prompt_mask = padded(prompt_ids, pad)
    new_t, new_mask = padded(new_ids, pad, left=False)
    return Generated(prompt_ids_t, prompt_mask, new_t, new_mask, [finished_text(lm.tokenizer, x) for x in new_ids])


def _guide(lm: LanguageModel, rows: list[int], prompt_ids: list[list[int]], new_ids: list[list[int]], settings: list[Setting],
           seeds: list[int], guides: list, opts: SamplingOptions, stop: threading.Event | None) -> None:
    """Decode ``rows`` piece by piece, appending the chosen candidate of each piece to ``new_ids`` in place.

    The judge reads the mean head input over a row's continuation so far (:func:`_mean_continuation`). The decode
    computes those inputs as it reads each token, so they are recorded
    (:meth:`~lmswitch.core.models.LanguageModel.head_inputs`) rather than computed again: each piece decodes one token
    more than it keeps, whose step reads the piece's last token, and each row keeps the sum over the pieces it chose.
    Where the recorded passes lack one (every candidate ended before the last step) or do not fit (a model's decode
    records other passes), the continuations are read again. The chosen candidates' KV cache goes on to the next
    piece (:func:`_carried`), so a row's prefix is read once."""
    n, eos, pad = opts.guide, set(_eos(lm)), lm.tokenizer.pad_token_id
    active = list(range(len(rows)))
    total = torch.zeros(len(rows), lm.hidden_size)  # each row's sum of head inputs over its continuation so far
    ids = mask = cache = None  # the next piece's candidates' prompts, and their cache when carried
    for piece, first in enumerate(range(0, opts.max_new_tokens, GUIDE_TOKENS)):
        if not active or (stop is not None and stop.is_set()):
            return
        k = min(GUIDE_TOKENS, opts.max_new_tokens - first)
        owner = [a for a in active for _ in range(n)]
        prefixes = [prompt_ids[rows[a]] + new_ids[rows[a]] for a in owner]
        if cache is None:
            ids, mask = padded(prefixes, pad)
            cache = shared_prompts(lm, ids, mask)
        with lm.head_inputs() as seen:
            gen, _ = _decode(lm, (ids, mask), [settings[a] for a in owner], [candidate_seed(seeds[a], piece * n + j) for a in active for j in range(n)],
                             replace(opts, max_new_tokens=k + 1, guide=1), None, stop, None, cache=cache if cache is not None else False)
        if stop is not None and stop.is_set():  # cancelled: the rows keep what they had
            return
        pieces = [x[:k] for x in _rows(gen)[1]]  # the extra token only read the piece's last one
        sums = _recorded_sums(seen, pieces, lm.hidden_size)
        if sums is None:
            means = _mean_continuation(lm, [p + x for p, x in zip(prefixes, pieces, strict=True)], [len(prompt_ids[rows[a]]) for a in owner])
        else:
            lengths = torch.tensor([len(new_ids[rows[a]]) + len(x) for a, x in zip(owner, pieces, strict=True)])
            means = (total[owner] + sums) / lengths.clamp_min(1)[:, None]
        still, chosen = [], []
        for g, a in enumerate(active):
            best = g * n + _choose(lm, guides[rows[a]], means[g * n : (g + 1) * n], [new_ids[rows[a]] + x for x in pieces[g * n : (g + 1) * n]])
            new_ids[rows[a]] += pieces[best]
            total[a] = means[best] * len(new_ids[rows[a]])  # the chosen continuation's sum, however its mean was found
            if not eos.intersection(pieces[best]) and len(new_ids[rows[a]]) < opts.max_new_tokens:
                still.append(a)
                chosen.append(best)
        active = still
        ids, mask, cache = _carried(cache, ids, mask, gen.new_ids, chosen, k, n)


def _carried(cache: DynamicCache | None, ids: torch.Tensor, mask: torch.Tensor, new: torch.Tensor, chosen: list[int], k: int,
             n: int) -> tuple[torch.Tensor | None, torch.Tensor | None, DynamicCache | None]:
    """The next piece's prompts (left-padded ids and mask) and their KV cache of all but the last token: the
    ``chosen`` candidates' rows of the piece's (``ids`` and the first ``k`` of ``new``), each ``n`` times, and of its
    ``cache``, which the decode extended through token ``k``; ``None``s when there is no such cache (the next piece
    reads its prompts again)."""
    if cache is None or not chosen or new.shape[1] < k or any(layer.get_seq_length() != ids.shape[1] + k for layer in cache.layers):
        return None, None, None
    rows = torch.tensor(chosen).repeat_interleave(n)
    for layer in cache.layers:  # (each on its own device, as the model keeps it)
        layer.batch_select_indices(rows.to(layer.keys.device))
        layer.crop(-1)  # the piece's last token: the next decode reads it first
    return (torch.cat([ids[rows], new[rows, :k].to(ids.dtype)], dim=1),
            torch.cat([mask[rows], torch.ones(len(rows), k, dtype=mask.dtype)], dim=1), cache)


def _recorded_sums(seen: list[torch.Tensor], texts: list[list[int]], d: int) -> torch.Tensor | None:
    """Per candidate, the sum of the head inputs after each token of its piece (``texts``), ``(len(texts), d)``, from a
    decode's recorded passes (``seen[t]`` read the piece's token ``t``; pass 0 read the prompt); None when they lack one
    or do not fit."""
    steps = len(seen) - 1
    if any(c.ndim != 3 or c.shape[0] != len(texts) or c.shape[-1] != d for c in seen) or max(map(len, texts), default=0) > steps:
        return None
    if not steps:
        return torch.zeros(len(texts), d)
    states = torch.stack([c[:, -1] for c in seen[1:]], 1).float().cpu()  # (candidates, steps, d)
    keep = torch.arange(steps)[None, :] < torch.tensor([len(x) for x in texts])[:, None]
    return torch.where(keep[..., None], states, 0.0).sum(1)  # (a finished row's padding passes: whatever they hold)


def repetitive(text: str) -> bool:
    """Whether ``text`` repeats a word twice in a row ("great great") or a phrase of three words ("great job. Great job.")."""
    words = [w.lower() for w in _WORDS.findall(text)]
    grams = [tuple(words[i : i + 3]) for i in range(len(words) - 2)]
    return loops(text, 2) or len(set(grams)) < len(grams)


def _choose(lm: LanguageModel, judges: list, means: torch.Tensor, continuations: list[list[int]]) -> int:
    """The candidate with the highest guide score among those that are not :func:`repetitive` (all, when every one is)."""
    score = guide_scores(judges, means)
    repeats = torch.tensor([repetitive(lm.tokenizer.decode(c, skip_special_tokens=True)) for c in continuations])
    return int(torch.where(repeats & ~repeats.all(), float("-inf"), score).argmax())


def _eos(lm: LanguageModel) -> list[int]:
    eos = lm.tokenizer.eos_token_id
    return [] if eos is None else [eos]
