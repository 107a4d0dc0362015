"""Many users, one model: concurrent generation requests merged into batched decodes on the compute thread.

Each request has its own prompt, switches and ε, seed and length; requests that
share the sampling settings (temperature, top-p, chat, adaptive strength) are
decoded together, each row with its own steering and its own random stream. A
request that arrives while a decode runs is prefilled and joins it at its next
step (:class:`_Rolling`); a finished row leaves at once. Steering acts on the head alone, so a prompt's KV cache
serves every request of it, whatever its switches, ε and seed: prompts read lately are kept (:class:`_Prompts`), and a
slider dragged over one prompt, or a steered row and its unsteered twin, read it once. Models whose KV cache
cannot be merged (sliding-window layers) decode each batch in one
:func:`~lmswitch.core.generate.generate_tokens` call instead. Requests decoded among candidates (best of n, guided:
the text is known only at the end) are decoded whole too, one batch at a time (the others wait in the queue), as
background work: the running rows take their steps at its pause points (:mod:`lmswitch.serve.compute`), and it stops
once nobody wants it (its readers stopped reading, or set the stop flag they passed). A row's tokens are
the ones the request would get alone (same seed): the packed linear layers give a row the same bits whatever rows
share the product (in bfloat16, products of :data:`~lmswitch.core.packed.INVARIANT_ROWS` rows at most), and the
batcher's attention is batch-invariant (:mod:`lmswitch.core.attention`, for models that use SDPA, as the bundled ones
do), so this holds in bfloat16 too; its text stops at its own length. That is on the CPU: on
a GPU only the attention is batch-invariant (its linear layers are cuBLAS's), and a row can, sometimes, differ.

The scores shown under the finished outputs need no body pass: each step records
the head's input before steering, and a finished row's tokens are scored under
the unsteered model from those when asked (one head product); an unsteered row (a twin) records its tokens'
log-probabilities as it draws them, from the very logits it draws from, so it needs none. Where a decode did not
record them (whole decodes), the comparisons that finish together are scored in
one body pass (:meth:`Batcher.scores`).

Over capacity (``max_waiting`` requests already waiting) :meth:`Batcher.stream`
raises :class:`Busy` at once, so no one waits silently until a timeout.

>>> batcher = Batcher(lm, ComputeThread())                                            # doctest: +SKIP
>>> *partial, done = batcher.stream("My weekend was", [(sentiment, 6)], seed=1, options=SamplingOptions())  # doctest: +SKIP
>>> done.text                                                                           # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import torch
from transformers import DynamicCache, StoppingCriteria
from transformers.generation.streamers import BaseStreamer

from lmswitch.core.attention import batch_invariant, use_batch_invariant
from lmswitch.core.budget import Budget, RowBudgets
from lmswitch.core.generate import (
    CoupledSampler,
    Prompt,
    check_seed,
    encode_prompts,
    finished_text,
    generate_tokens,
    noise_streams,
    padded,
    plain_cache,
    positions,
)
from lmswitch.core.guard import RepeatGuard
from lmswitch.core.guided import judges_of
from lmswitch.core.hidden import target_logprobs
from lmswitch.core.models import LanguageModel
from lmswitch.core.options import SamplingOptions
from lmswitch.core.steering import RowSteering, Setting, check_setting, steering, steers
from lmswitch.harness.evaluate import TextScores, scores_of, text_scores
from lmswitch.serve.compute import ComputeThread, Merged
from lmswitch.serve.limits import check_new_tokens, check_request

MAX_BATCH = 8  # rows decoded together
MAX_WAITING = 32  # requests waiting for a batch; one more gets Busy
PROMPT_BYTES = 64 * 2**20  # KV caches of prompts kept for later requests, per served model (46 KB a token in float32 on the embedded model)


class Busy(RuntimeError):
    """The server holds as many waiting requests as it takes; retry in a moment."""


@dataclass(frozen=True)
class Row:
    """A finished request: its text, its new token ids (up to and including an end-of-sequence token) and prompt size."""

    text: str
    new_ids: list[int]
    prompt_tokens: int
    ended: bool  # the model ended the text (end-of-sequence) before the length limit
    # (len(text_ids), d): the head input (before steering) behind each token of the text, recorded while decoding, so
    # scoring or explaining the text needs no body pass (:meth:`Batcher.logprobs`); None where the decode did not record them
    hidden: torch.Tensor | None = field(default=None, compare=False, repr=False)
    # the unsteered model's log-probability of each token of the text, where the decode had it at no cost: a row
    # decoded unsteered (an unsteered twin) draws from those very logits; None where it did not
    logprobs: tuple[float, ...] | None = field(default=None, compare=False, repr=False)

    @property
    def text_ids(self) -> list[int]:
        """The new tokens that make the text: ``new_ids`` less a final end-of-sequence token."""
        return self.new_ids[:-1] if self.ended else self.new_ids


@dataclass(eq=False)
class _Request:
    prompt: Prompt
    setting: Setting
    seed: int
    options: SamplingOptions
    out: queue.Queue = field(default_factory=queue.Queue)
    gone: threading.Event = field(default_factory=threading.Event)  # the caller stopped reading
    cancel: threading.Event | None = None  # the caller's own stop flag (e.g. set by a newer request of the same user)

    def dropped(self) -> bool:
        """Whether nobody wants the rest: the caller stopped reading, or set its stop flag (a whole decode's reader
        waits for the end, so only the flag can say so before it)."""
        return self.gone.is_set() or (self.cancel is not None and self.cancel.is_set())

    @property
    def key(self) -> tuple:
        """Requests with the same key can share a batch (one sampler temperature and top-p, one template, one KL cap)."""
        o = self.options  # best of n and guided decoding choose among candidates, so their requests also share their length
        return (o.temperature, o.top_p, o.chat, o.adaptive, o.kl_budget, o.generation_budget, o.best_of, o.guide,
                o.repeat_guard, o.max_new_tokens if o.candidates > 1 else 0)


class _Dispatch(BaseStreamer):
    """Hands each row's text so far to its own request, up to that request's length."""

    def __init__(self, lm: LanguageModel, requests: list[_Request]) -> None:
        self.tokenizer, self.requests = lm.tokenizer, requests
        self.ids: list[list[int]] = [[] for _ in requests]
        self.eos = lm.tokenizer.eos_token_id
        self.prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:  # the first call carries the prompts
            self.prompt_seen = True
            return
        for ids, request, token in zip(self.ids, self.requests, value.reshape(len(self.ids), -1)[:, 0].tolist(), strict=True):
            if len(ids) < request.options.max_new_tokens and not (ids and ids[-1] == self.eos):
                ids.append(token)
                request.out.put(self.tokenizer.decode(ids, skip_special_tokens=True))

    def end(self) -> None:
        pass


class _AllGone(StoppingCriteria):
    """Stops the decode once every request in it has stopped reading: a stopping criterion, and (``is_set``) the
    ``stop`` flag of decodes that take no per-row criterion (guided, best of n)."""

    def __init__(self, requests: list[_Request]) -> None:
        self.requests = requests

    def is_set(self) -> bool:
        return all(r.dropped() for r in self.requests)

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        return torch.full((input_ids.shape[0],), self.is_set(), dtype=torch.bool, device=input_ids.device)


DROPPED = object()  # what a request dropped before its decode began gets instead of text: its stream ends there


class NotAdmitted(Exception):
    """Raised (from the cause) when requests could not join the running decode; its rows are untouched."""


class _Stream:
    """A request's results as they come; closing it (or dropping it, read or not) tells the batcher nobody listens."""

    def __init__(self, request: _Request) -> None:
        self.request = request

    def __iter__(self) -> _Stream:
        return self

    def __next__(self) -> str | Row:
        if self.request.gone.is_set():
            raise StopIteration
        item = self.request.out.get()
        if item is DROPPED:
            self.close()
            raise StopIteration
        if isinstance(item, BaseException):
            self.close()
            raise item
        if isinstance(item, Row):
            self.close()
        return item

    def close(self) -> None:
        self.request.gone.set()

    __del__ = close


def _left_pad(t: torch.Tensor, length: int, dim: int) -> torch.Tensor:
    """``t`` with zeros before it along ``dim`` up to ``length``."""
    missing = length - t.shape[dim]
    if not missing:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)


@torch.inference_mode()
def _after_head_is_exact(lm: LanguageModel) -> bool:
    """Whether ``lm``'s logits are :meth:`~lmswitch.core.models.LanguageModel.after_head` of its head's output (one
    token): a family that changes them after the head in a way ``after_head`` does not know fails."""
    ids = torch.tensor([[lm.tokenizer.eos_token_id or 0]], device=lm.input_device)
    with lm.head_inputs() as seen:
        logits = lm.model(input_ids=ids, logits_to_keep=1).logits.float()
    return torch.allclose(logits, lm.after_head(lm.head(seen[-1])).float(), rtol=1e-3, atol=1e-4)


@dataclass(frozen=True)
class _Prompt:
    """A prompt read once: its KV cache (one row, its tokens only, per layer) and the head's input after its last token."""

    keys: list[torch.Tensor]  # per layer (1, heads, tokens, head size)
    values: list[torch.Tensor]
    head: torch.Tensor  # (d,), before any steering

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in (*self.keys, *self.values))


class _Prompts:
    """The prompts read lately, by token ids, at most ``budget`` bytes of them: the least recently used leave first.

    Kept for as long as the model serves: right while nothing but the head is steered. Steering acts on the head's
    input only; a body hook (``harness.baselines``' activation addition, used by the CLI's frontier, not the server)
    would change what a prompt's cache should hold."""

    def __init__(self, budget: int = PROMPT_BYTES) -> None:
        self.budget = budget
        self.kept: OrderedDict[tuple[int, ...], _Prompt] = OrderedDict()
        self.nbytes = 0
        self.reads = 0  # prompts read by a body pass (not found here)

    def get(self, ids: tuple[int, ...]) -> _Prompt | None:
        found = self.kept.get(ids)
        if found is not None:
            self.kept.move_to_end(ids)
        return found

    def put(self, ids: tuple[int, ...], prompt: _Prompt) -> None:
        if ids in self.kept or prompt.nbytes > self.budget:
            return
        self.kept[ids] = prompt
        self.nbytes += prompt.nbytes
        while self.nbytes > self.budget:
            self.nbytes -= self.kept.popitem(last=False)[1].nbytes


class _Rolling:
    """A decode in progress whose rows join between steps (after their own prefill) and leave as soon as they finish.

    Each step feeds every row its last token with the KV cache of all rows, left-padded to one length; a row's
    tokens come from its own seeded sampler, as in :func:`~lmswitch.core.generate.generate_tokens` alone."""

    def __init__(self, lm: LanguageModel) -> None:
        self.lm = lm
        self.eos = lm.tokenizer.eos_token_id
        self.prompts = _Prompts()
        self.reset()

    def reset(self) -> None:
        """No rows, no cache: the state before the first request, and after the last one left (or a failed step)."""
        self.requests: list[_Request] = []
        self.samplers: list[CoupledSampler] = []
        self.ids: list[list[int]] = []
        self.tails: list[list[int]] = []  # each row's last prompt tokens, as many as its repeat guard watches
        self.heads: list[list[torch.Tensor]] = []  # each row's head input (unsteered) for each of its tokens so far
        self.logprobs: list[list[float] | None] = []  # an unsteered row's log-probability of each of its tokens so far
        self.prompt_tokens: list[int] = []
        self.mask: torch.Tensor | None = None  # (B, L): which cached positions are real tokens
        self.cache: DynamicCache | None = None
        self.steering: RowSteering | None = None  # the running rows' steering, formed once per change of rows

    @property
    def key(self) -> tuple | None:
        """The sampling settings the running rows share (None when none run)."""
        return self.requests[0].key if self.requests else None

    @property
    def horizon(self) -> int:
        """Tokens until the longest running row is done (or sooner, at an end token): a request no longer than this can
        join without holding the decode any longer."""
        return max((r.options.max_new_tokens - len(ids) for r, ids in zip(self.requests, self.ids, strict=True)), default=0)

    @staticmethod
    def supported(lm: LanguageModel) -> bool:
        """Only plain per-layer caches can be padded and merged (not sliding-window or hybrid ones). And a kept prompt's
        first token comes from the head alone, so the model's logits must be what ``after_head`` makes of its head's output
        (checked on one token)."""
        return plain_cache(lm) is not None and _after_head_is_exact(lm)

    def _steered(self, requests: list[_Request], budgets: list[Budget | None], rows: RowSteering, guard: RepeatGuard | None):
        """The head steered by ``rows``, each row charging its own steering budget (adaptive requests) and filling the
        rows' repeat guard."""
        budget = RowBudgets(budgets) if budgets[0] is not None else None
        return steering(self.lm, rows, kl_budget=requests[0].options.budget, budget=budget, guard=guard)

    @staticmethod
    def _guard(requests: list[_Request], texts: list[list[int]]) -> RepeatGuard | None:
        """The repeat guard of rows whose texts so far end with ``texts`` (their requests share its window)."""
        window = requests[0].options.repeat_guard
        return RepeatGuard.of_rows(texts, window) if window else None

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, cache: DynamicCache, requests: list[_Request],
                 budgets: list[Budget | None], rows: RowSteering, guard: RepeatGuard | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The next-token logits (B, V) float32 of ``ids`` given ``cache``, each row steered by ``rows``, and the head's
        input before steering (B, d), from which the unsteered model scores the tokens drawn."""
        where = positions(mask)
        device = self.lm.input_device
        with self._steered(requests, budgets, rows, guard), torch.inference_mode(), self.lm.head_inputs() as seen:
            out = self.lm.model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=where[:, -ids.shape[1]:].to(device),
                                past_key_values=cache, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1, :].float(), seen[-1][:, -1].clone()

    @torch.inference_mode()
    def _read(self, prompts: list[tuple[int, ...]]) -> dict[tuple[int, ...], _Prompt]:
        """Each distinct prompt's :class:`_Prompt`: kept ones as they are, the others read together in one body pass."""
        found = {ids: self.prompts.get(ids) for ids in dict.fromkeys(prompts)}
        missing = [ids for ids, prompt in found.items() if prompt is None]
        if missing:
            ids, mask = padded(missing, self.lm.tokenizer.pad_token_id)
            width, cache = mask.shape[1], DynamicCache(config=self.lm.model.config)
            heads = self.lm.final_hidden(ids, mask.to(self.lm.input_device), positions(mask), cache=cache)[:, -1]
            for b, p in enumerate(missing):
                keys = [layer.keys[b : b + 1, :, width - len(p) :].clone() for layer in cache.layers]
                values = [layer.values[b : b + 1, :, width - len(p) :].clone() for layer in cache.layers]
                found[p] = _Prompt(keys, values, heads[b].clone())
                self.prompts.put(p, found[p])
            self.prompts.reads += len(missing)
        return found

    def admit(self, new: list[_Request]) -> list[tuple[_Request, Row]]:
        """Read ``new`` requests' prompts (unless kept), sample their first tokens and add them to the running rows;
        returns the finished rows."""
        try:  # nothing of the running rows changes before _join: a failure here is the new requests' alone
            # each prompt cut to the context less its own length (as alone), not the longest of the requests joining
            encoded = [encode_prompts(self.lm, [r.prompt], r.options) for r in new]
            tokens = [tuple(ids[0][mask[0].bool()].tolist()) for ids, mask in encoded]
            mask = padded(tokens, 0)[1]
            read = self._read(tokens)
            prompts = [read[t] for t in tokens]
            heads = torch.stack([p.head for p in prompts])
            budgets = [Budget(1, r.options.per_generation) if r.options.per_generation is not None else None for r in new]
            guard = self._guard(new, [list(t) for t in tokens])
            with self._steered(new, budgets, RowSteering.of([r.setting for r in new]), guard), torch.inference_mode():
                logits = self.lm.after_head(self.lm.head(heads[:, None]))[:, -1].float()
        except Exception as err:
            raise NotAdmitted from err
        self._join(prompts, mask)
        self.requests += new
        self.steering = None
        streams = noise_streams([r.seed for r in new])  # requests with one seed (a steered row and its twin) share one
        self.samplers += [CoupledSampler([g], r.options.temperature, r.options.top_p, b) for r, g, b in zip(new, streams, budgets, strict=True)]
        self.ids += [[] for _ in new]
        self.tails += [list(t[max(0, len(t) - r.options.repeat_guard) :]) for r, t in zip(new, tokens, strict=True)]
        self.heads += [[h] for h in heads]
        self.logprobs += [None if steers(r.setting) else [] for r in new]
        self.prompt_tokens += [int(m.sum()) for m in mask]
        return self._sample(logits, first=len(self.requests) - len(new), guard=guard)

    def _join(self, prompts: list[_Prompt], mask: torch.Tensor) -> None:
        """Add the KV caches of ``prompts`` (left-padded as ``mask``) to the running rows'."""
        width = mask.shape[1]
        if self.cache is None:
            self.cache, self.mask = DynamicCache(config=self.lm.model.config), mask.new_zeros(0, 0)
        length = max(self.mask.shape[1], width)
        for layer in range(len(prompts[0].keys)):
            keys = [_left_pad(p.keys[layer], length, -2) for p in prompts]
            values = [_left_pad(p.values[layer], length, -2) for p in prompts]
            if self.cache.layers[layer].is_initialized:
                old = self.cache.layers[layer]
                keys, values = [_left_pad(old.keys, length, -2), *keys], [_left_pad(old.values, length, -2), *values]
                old.keys, old.values = torch.cat(keys), torch.cat(values)
            else:
                self.cache.update(torch.cat(keys), torch.cat(values), layer)
        self.mask = torch.cat([_left_pad(self.mask, length, 1), _left_pad(mask, length, 1)])

    def step(self) -> list[tuple[_Request, Row]]:
        """One decode step for every running row; returns the rows that finished."""
        last = torch.tensor([[ids[-1]] for ids in self.ids])
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(self.ids), 1)], dim=1)
        budgets = [sampler.budget for sampler in self.samplers]  # each row's steering budget (adaptive), or None
        self.steering = self.steering or RowSteering.of([r.setting for r in self.requests])
        guard = self._guard(self.requests, [tail + ids for tail, ids in zip(self.tails, self.ids, strict=True)])
        logits, heads = self._forward(last, self.mask, self.cache, self.requests, budgets, self.steering, guard)
        for row, h in zip(self.heads, heads, strict=True):
            row.append(h)
        return self._sample(logits, first=0, guard=guard)

    def _sample(self, logits: torch.Tensor, first: int, guard: RepeatGuard | None) -> list[tuple[_Request, Row]]:
        """Draw the next token of rows ``first…`` (logits row k belongs to row first + k), taking back what steering
        raised of their recent tokens (``guard``, filled by their pass); hand out text; drop finished rows."""
        sampler = CoupledSampler.joined(self.samplers[first:], guard)
        drawn = sampler.draw(logits)  # each row's own stream
        self._record_logprobs(logits, sampler.model_logp, drawn, first)
        tokens = drawn.tolist()
        for b, token in enumerate(tokens, start=first):
            self.ids[b].append(token)
            self.requests[b].out.put(self.lm.tokenizer.decode(self.ids[b], skip_special_tokens=True))
        done = [b for b, (r, ids) in enumerate(zip(self.requests, self.ids, strict=True))
                if ids and (ids[-1] == self.eos or len(ids) >= r.options.max_new_tokens or r.dropped())]
        finished = [(self.requests[b], self._row(b)) for b in done]
        if done:
            self._drop(done)
        return finished

    def _record_logprobs(self, logits: torch.Tensor, logp: torch.Tensor | None, tokens: torch.Tensor, first: int) -> None:
        """Each unsteered row's log-probability of the token it drew, from the logits it drew it from: the unsteered
        model's own, so scoring its text later needs no head product. ``logp``: the sampler's log-softmax of ``logits``
        where it made one (at temperature 1, the default), else it is made here for those rows."""
        rows = [k for k in range(len(tokens)) if self.logprobs[first + k] is not None]
        if not rows:
            return
        index = torch.tensor(rows)
        logp = logp[index] if logp is not None else torch.log_softmax(logits[index], dim=-1)
        chosen = logp.gather(1, tokens[index, None].to(logp.device))[:, 0].tolist()
        for k, value in zip(rows, chosen, strict=True):
            self.logprobs[first + k].append(value)

    def _row(self, b: int) -> Row:
        """Row ``b`` finished, with the head inputs its decode recorded for the tokens of its text."""
        ids = self.ids[b]
        row = Row(finished_text(self.lm.tokenizer, ids), ids, self.prompt_tokens[b], ids[-1] == self.eos)
        n = len(row.text_ids)
        kept = self.heads[b][:n]
        return replace(row, hidden=torch.stack(kept) if kept else self.heads[b][0].new_zeros(0, self.lm.hidden_size),
                       logprobs=tuple(self.logprobs[b][:n]) if self.logprobs[b] is not None else None)

    def _drop(self, rows: list[int]) -> None:
        keep = [b for b in range(len(self.requests)) if b not in rows]
        if not keep:
            self.reset()
            return
        index = torch.tensor(keep)
        self.cache.batch_select_indices(index.to(self.cache.layers[0].keys.device))
        self.mask = self.mask[index]
        start = int(self.mask.any(0).long().argmax())  # columns that are padding in every remaining row: cut them
        if start:
            self.mask = self.mask[:, start:]
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[..., start:, :], layer.values[..., start:, :]
        for name in ("requests", "samplers", "ids", "tails", "heads", "logprobs", "prompt_tokens"):
            setattr(self, name, [getattr(self, name)[b] for b in keep])
        self.steering = None


class Batcher:
    """Merges concurrent generation requests into batched decodes on ``compute``'s thread."""

    def __init__(self, lm: LanguageModel, compute: ComputeThread, max_batch: int = MAX_BATCH, max_waiting: int = MAX_WAITING) -> None:
        self.lm, self.compute = lm, compute
        self.max_batch, self.max_waiting = max_batch, max_waiting
        use_batch_invariant(lm.model)  # a request gets the same bits beside other requests as alone
        self.waiting: list[_Request] = []
        self.lock = threading.Lock()
        self.scheduled = False
        self.whole_running = False  # a decode among candidates is under way (on the compute thread); the next waits for it
        self.batches = 0  # admissions (or whole decodes) so far, and the rows in them
        self.rows = 0
        self.rolling = _Rolling(lm) if compute.run(_Rolling.supported, lm) else None  # rows join a running decode between its steps
        self._scores = Merged(compute, self._score_all)

    def scores(self, prompt: str, rows: list[Row], *, chat: bool) -> list[TextScores]:
        """The :class:`~lmswitch.harness.evaluate.TextScores` of finished rows of ``prompt``: from the head inputs their
        decode recorded (:meth:`logprobs`, one head product), or else by :func:`~lmswitch.harness.evaluate.text_scores`
        on the compute thread, merged with other requests' scores. Only asked for where scores are shown: a row of the
        OpenAI endpoints costs nothing more than its decode."""
        if all(row.hidden is not None for row in rows):
            return scores_of([row.text for row in rows], self.compute.run(self.logprobs, rows))
        return self._scores((prompt, [row.text for row in rows], bool(chat)))

    @torch.inference_mode()
    def logprobs(self, rows: list[Row]) -> list[list[float]]:
        """The unsteered model's log-probability of each token of each row's text: as its decode recorded it (rows
        decoded unsteered), or from the head inputs it recorded (rows with ``hidden``), in one head pass over all of
        those, no body pass."""
        todo = [row for row in rows if row.logprobs is None]
        ids = torch.tensor([t for row in todo for t in row.text_ids], dtype=torch.long)
        logp = target_logprobs(self.lm, torch.cat([row.hidden for row in todo]), ids, [None])[0] if len(ids) else torch.zeros(0)
        computed = iter(logp.split([len(row.text_ids) for row in todo]))
        return [list(row.logprobs) if row.logprobs is not None else next(computed).tolist() for row in rows]

    @batch_invariant()  # a user's scores do not depend on the texts scored with them
    def _score_all(self, jobs: list[tuple[str, list[str], bool]]) -> list[list[TextScores]]:
        """Every job's scores, one call per chat setting."""
        out: dict[int, list[TextScores]] = {}
        for chat in {job[2] for job in jobs}:
            mine = [k for k, job in enumerate(jobs) if job[2] == chat]
            prompts = [jobs[k][0] for k in mine for _ in jobs[k][1]]
            flat = iter(text_scores(self.lm, prompts, [t for k in mine for t in jobs[k][1]], chat=chat))
            out.update({k: [next(flat) for _ in jobs[k][1]] for k in mine})
        return [out[k] for k in range(len(jobs))]

    def stream(self, prompt: Prompt, setting: Setting, *, seed: int, options: SamplingOptions,
               cancel: threading.Event | None = None) -> Iterator[str | Row]:
        """The request's text so far after each new token, then its :class:`Row`. Checked at once: bad values raise
        ``ValueError``/``TypeError``, a full queue :class:`Busy`. Closing the iterator, or setting ``cancel``, drops the
        request's row (a row decoded among candidates then ends early: its reader gets what there is)."""
        check_new_tokens(options)  # this server's range, before the library's (the model's context)
        options.validate(self.lm)
        check_setting(self.lm, setting)
        check_seed(seed)
        check_request(self.lm, prompt, options)  # a bad prompt fails here, not in a decode shared with others' rows
        if options.guide > 1:
            judges_of(setting)  # every steering switch has a judge to guide with
        request = _Request(prompt, list(setting), seed, options, cancel=cancel)
        with self.lock:
            if len(self.waiting) >= self.max_waiting:
                raise Busy(f"the server is busy ({len(self.waiting)} requests waiting); retry in a few seconds")
            self.waiting.append(request)
            self._schedule()
        return _Stream(request)

    def generate(self, prompt: Prompt, setting: Setting, *, seed: int, options: SamplingOptions,
                 cancel: threading.Event | None = None) -> Row | None:
        """:meth:`stream` to the end: the finished :class:`Row` (None when ``cancel`` dropped the request while it waited
        for a decode; dropped during one, the :class:`Row` of what there was)."""
        row = None
        for item in self.stream(prompt, setting, seed=seed, options=options, cancel=cancel):
            row = item if isinstance(item, Row) else row
        return row

    def _schedule(self) -> None:  # with self.lock held
        """Queue a tick if it has work: rows running, or waiting requests it can take (a request decoded among
        candidates waits while such a decode is under way; the decode schedules a tick when it ends)."""
        takeable = any(r.options.candidates == 1 for r in self.waiting) if self.whole_running else bool(self.waiting)
        if (takeable or (self.rolling is not None and self.rolling.requests)) and not self.scheduled:
            self.scheduled = True
            self.compute.submit(self._tick)

    def _take(self, key: tuple | None, room: int, whole: bool = False, horizon: int = 0) -> list[_Request]:
        """Up to ``room`` waiting requests that can share a decode with sampling settings ``key`` (None: the oldest's), in
        arrival order. ``whole``: only requests decoded among candidates (best of n, guided), as many as fit ``room``
        rows (one at least, even when its n candidates alone are more); else only the others (the rows a rolling decode
        can take)."""
        with self.lock:
            for r in [r for r in self.waiting if r.dropped()]:
                self.waiting.remove(r)
                r.out.put(DROPPED)  # its reader (waiting for a first item that will never come) stops
            kind = [r for r in self.waiting if (r.options.candidates > 1) == whole]
            if not kind or room < 1:
                return []
            key = key if key is not None else kind[0].key
            room = max(1, room // kind[0].options.candidates)
            # first come, first served across settings: those ahead of the first request with other settings join, and
            # those behind it that end within ``horizon`` (the running rows' last step), so it waits no longer; the
            # running rows then drain and it goes next (else a steady stream of one setting would hold it for good)
            ahead = list(itertools.takewhile(lambda r: r.key == key, kind))
            behind = [r for r in kind[len(ahead) :] if r.key == key and r.options.max_new_tokens <= horizon]
            batch = (ahead + behind)[:room]
            self.waiting = [r for r in self.waiting if r not in batch]
            return batch

    @batch_invariant()  # prompts read, steps and whole decodes give a request the bits it gets alone
    def _tick(self) -> None:
        """On the compute thread, one bounded piece of work (other jobs run between two): admit waiting requests into the
        running decode, or decode one more token of its rows; hand out finished rows; then schedule the next piece."""
        rolling, new = self.rolling, []
        try:
            # best of n, guided: chosen among candidates, so decoded whole, one batch at a time (the others wait, and
            # count towards max_waiting), as background work: the running rows take their steps at its pause points
            whole = [] if self.whole_running else self._take(None, self.max_batch, whole=True)
            if whole:
                self.whole_running = True
                self.compute.submit(self._decode_whole, whole, background=True)
            if rolling is None:  # a cache that cannot be merged: every batch is decoded whole
                new = self._take(None, self.max_batch)
                if new:
                    self._decode(new)
                return
            new = self._take(rolling.key, self.max_batch - len(rolling.requests), horizon=rolling.horizon)
            if new:
                self.batches, self.rows = self.batches + 1, self.rows + len(new)
            finished = rolling.admit(new) if new else rolling.step() if rolling.requests else []
            for request, row in finished:
                request.out.put(row)
        except NotAdmitted as err:  # the running rows go on; the new requests hear of it
            for request in new:
                request.out.put(err.__cause__)
        except BaseException as err:  # every request in flight hears of it; the batcher keeps serving
            for request in {id(r): r for r in [*new, *(rolling.requests if rolling else [])]}.values():
                request.out.put(err)
            if rolling is not None:
                rolling.reset()
        finally:
            with self.lock:
                self.scheduled = False
                self._schedule()

    @batch_invariant()
    def _decode_whole(self, batch: list[_Request]) -> None:
        """:meth:`_decode` of requests decoded among candidates, run as background work on the compute thread: a guided
        or best-of-n decode takes seconds, and the rolling decode's steps (other users' tokens) run at its pause points
        meanwhile. A failure goes to the batch's requests; the batcher keeps serving."""
        try:
            self._decode(batch)
        except BaseException as err:
            for request in batch:
                request.out.put(err)
        finally:
            self.whole_running = False
            with self.lock:  # the next batch decoded among candidates, if one waits
                self._schedule()

    def _decode(self, batch: list[_Request]) -> None:
        """The whole decode of ``batch`` in one call (requests decoded among candidates, and every batch of models whose
        cache cannot be merged)."""
        self.batches, self.rows = self.batches + 1, self.rows + len(batch)
        longest = max(r.options.max_new_tokens for r in batch)
        options = replace(batch[0].options, max_new_tokens=longest)
        streamed = options.candidates == 1  # best of n, guided: no text before the end, when the chosen candidate is known
        dispatch, gone = _Dispatch(self.lm, batch), _AllGone(batch)
        generated = generate_tokens(self.lm, [r.prompt for r in batch], [r.setting for r in batch], [r.seed for r in batch], options,
                                    dispatch if streamed else None, stop=None if streamed else gone, stopping=gone if streamed else None)
        for b, request in enumerate(batch):
            ids = dispatch.ids[b] if streamed else generated.new_ids[b][generated.new_mask[b].bool()].tolist()  # (same lengths)
            ended = bool(ids) and ids[-1] == dispatch.eos
            request.out.put(Row(finished_text(self.lm.tokenizer, ids), ids, int(generated.prompt_mask[b].sum()), ended))
