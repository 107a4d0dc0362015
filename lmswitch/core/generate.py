"""Generation with switches: plain, streaming, and batched ε sweeps.

Decoding runs through ``model.generate`` (KV cache, stopping, streamers). Sampling
is done by :class:`CoupledSampler`, a logits processor that draws every row's
token with Gumbel-max from that row's own seeded noise stream. Rows that share a
seed share their noise, so a sweep over ε (one batch, one seed) differs only
where the switch changes the distribution, and a row at ε = 0 reproduces the
unsteered generation with the same seed token for token.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import math
import queue
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

import torch
from transformers import DynamicCache, GenerationConfig, LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.cache_utils import DynamicLayer
from transformers.generation.streamers import BaseStreamer

from lmswitch.core.budget import Budget, RowBudgets
from lmswitch.core.checks import check_eps_values, check_samples, check_seed
from lmswitch.core.guard import RepeatGuard
from lmswitch.core.models import LanguageModel, check_model
from lmswitch.core.options import SAMPLES, SAMPLING, SEED, SamplingOptions
from lmswitch.core.steering import Setting, as_setting, steer_rows
from lmswitch.core.switch import Switch


def noise_streams(seeds: Sequence[int | torch.Generator]) -> list[torch.Generator]:
    """Each row's noise stream: the generator given (shared with the sampler it came from), or one per seed. Rows with
    one seed (a steered row and its unsteered twin, a sweep's settings) would draw the same noise, so they share one
    stream, which :class:`CoupledSampler` draws once per step for all of them."""
    made: dict[int, torch.Generator] = {}
    streams = []
    for seed in seeds:
        if isinstance(seed, torch.Generator):
            streams.append(seed)
            continue
        if int(seed) not in made:
            made[int(seed)] = torch.Generator().manual_seed(int(seed))
        streams.append(made[int(seed)])
    return streams


class CoupledSampler(LogitsProcessor):
    """Temperature + nucleus (top-p) sampling by Gumbel-max with one seeded noise stream per seed (:func:`noise_streams`).

    Returns scores that are 0 at the sampled token and -inf elsewhere, so greedy
    decoding in ``generate`` picks exactly the sampled token. With a ``budget``, each
    row is charged for what steering did to its sampled token (:mod:`lmswitch.core.budget`).
    """

    def __init__(self, seeds: Sequence[int | torch.Generator], temperature: float, top_p: float, budget: Budget | None = None,
                 stops: Sequence[int] | None = None, guard: RepeatGuard | None = None) -> None:
        self.generators = noise_streams(seeds)
        self.temperature = temperature
        self.top_p = top_p
        self.budget = budget
        self.guard = guard  # takes back what steering raised of each row's recent tokens (lmswitch.core.guard)
        # with ``stops`` (end-of-text ids): each row's log-likelihood under the logits it is given (the steered model at
        # temperature 1) and its token count, up to and including its first stop
        self.stops = torch.tensor(sorted(stops), dtype=torch.long) if stops is not None else None
        self.model_logp: torch.Tensor | None = None  # the last draw's temperature-1 log-probabilities, where it computed them
        self.loglik = torch.zeros(len(seeds), dtype=torch.float64)
        self.tokens = torch.zeros(len(seeds), dtype=torch.long)
        self.ended = torch.zeros(len(seeds), dtype=torch.bool)

    @classmethod
    def joined(cls, samplers: Sequence[CoupledSampler], guard: RepeatGuard | None = None) -> CoupledSampler:
        """One sampler over the rows of ``samplers`` (the same temperature and top-p, no stops): it draws from their
        noise streams and charges their budgets, so each row gets the tokens its own sampler would give it, in one
        batched pass (a running decode's rows, which join and leave, each keep a sampler of their own). ``guard``:
        the rows' repeat guard, the one the steering hook of their pass filled."""
        first = samplers[0]
        if any(s.stops is not None or (s.temperature, s.top_p, s.budget is None) != (first.temperature, first.top_p, first.budget is None)
               for s in samplers):
            raise ValueError("samplers joined into one draw share their temperature and top-p, all have a steering budget or "
                             "none does, and score no stops")
        budgets = [s.budget for s in samplers]
        return cls([g for s in samplers for g in s.generators], first.temperature, first.top_p,
                   RowBudgets(budgets) if first.budget is not None else None, guard=guard)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """As a logits processor: scores 0 at each row's sampled token and -inf elsewhere."""
        choice = self.draw(scores)
        out = torch.full_like(scores, -math.inf)
        out[torch.arange(len(choice)), choice] = 0.0
        return out

    def draw(self, scores: torch.Tensor) -> torch.Tensor:
        """The next token of every row of ``scores`` (B, V): (B,) ids, each row's stream advanced by one draw."""
        B, V = scores.shape
        if B != len(self.generators):
            raise RuntimeError(f"sampler has {len(self.generators)} noise streams for a batch of {B}")
        logits = scores.float() if self.guard is None else self.guard.apply(scores.float())
        self.model_logp = None  # the last draw's, dropped before this one's is made
        # every stream advances by one draw per step, also for greedy rows, so streams stay aligned
        drawn: dict[int, torch.Tensor] = {}  # one draw per stream, whatever the rows that share it
        for g in self.generators:
            drawn[id(g)] = drawn[id(g)] if id(g) in drawn else torch.rand(V, generator=g)
        noise = torch.stack([drawn[id(g)] for g in self.generators]).to(logits.device)  # (B, V)
        # the model's own log-probabilities (temperature 1), for the steering budget and best of n: computed once
        needed = self.budget is not None or self.stops is not None or self.temperature == 1
        model_logp = self.model_logp = torch.log_softmax(logits, dim=-1) if needed else None
        if self.temperature == 0:
            choice = logits.argmax(-1)
        else:
            logp = model_logp if self.temperature == 1 else torch.log_softmax(logits / self.temperature, dim=-1)
            if self.top_p < 1:
                top_logp, top_idx = self._nucleus_candidates(logp)
                top_p = top_logp.exp()
                keep = (top_p.cumsum(-1) - top_p) < self.top_p  # the smallest prefix reaching top_p
                keep[:, 0] = True  # and the most likely token, for top_p 0
                gumbel = -torch.log(-torch.log(noise.gather(1, top_idx).clamp_min(1e-20)))
                best = (top_logp + gumbel).masked_fill(~keep, -math.inf).argmax(-1, keepdim=True)
                choice = top_idx.gather(1, best)[:, 0]
            else:
                gumbel = -torch.log(-torch.log(noise.clamp_min(1e-20)))
                choice = (logp + gumbel).argmax(-1)
        if self.budget is not None:
            self.budget.spend(model_logp, choice)
        if self.guard is not None:
            self.guard.push(choice)
        if self.stops is not None:
            self._score(model_logp, choice)
        return choice

    def _score(self, logp: torch.Tensor, choice: torch.Tensor) -> None:
        """Add each live row's chosen token's log-probability to its log-likelihood; a row ends at its first stop."""
        live = ~self.ended
        chosen = logp.gather(1, choice[:, None])[:, 0].double().cpu()
        self.loglik += torch.where(live, chosen, 0.0)
        self.tokens += live.long()
        self.ended |= torch.isin(choice.cpu(), self.stops)

    def mean_loglik(self) -> torch.Tensor:
        """(rows,) log-likelihood per token of every row so far (rows with no token: -inf)."""
        return torch.where(self.tokens > 0, self.loglik / self.tokens.clamp_min(1), -math.inf)

    def _nucleus_candidates(self, logp: torch.Tensor, k: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
        """The top log-probabilities (descending) and ids of every row, enough of them to hold top_p, padded to one width.

        A full sort of the vocabulary per row and step would cost ~10× more; the
        nucleus is almost always far smaller than the vocabulary. Each row's ``k``
        grows (×4) only for that row, so a row's candidates never depend on the
        other rows of its batch (a request samples the same tokens alone as batched),
        and a few flat rows do not make every row sort thousands of words. Padding
        is -inf, past the nucleus of its row, so it is never kept.
        """
        V = logp.shape[-1]
        top_logp, top_idx = logp.topk(min(k, V), dim=-1)
        short = (top_logp.exp().sum(-1) < self.top_p).nonzero()[:, 0]
        while len(short) and k < V:
            k = min(k * 4, V)
            if len(short) == len(logp):  # every row: no copies
                top_logp, top_idx = more_logp, more_idx = logp.topk(k, dim=-1)
            else:
                more_logp, more_idx = logp[short].topk(k, dim=-1)
                top_logp = torch.nn.functional.pad(top_logp, (0, k - top_logp.shape[1]), value=-math.inf)
                top_idx = torch.nn.functional.pad(top_idx, (0, k - top_idx.shape[1]), value=0)
                top_logp[short], top_idx[short] = more_logp, more_idx
            short = short[more_logp.exp().sum(-1) < self.top_p]
        return top_logp, top_idx


class _RowStreamer(BaseStreamer):
    """Collects generated token ids per row and publishes the decoded texts after every step."""

    def __init__(self, tokenizer, rows: int, out: queue.Queue) -> None:
        self.tokenizer = tokenizer
        self.ids: list[list[int]] = [[] for _ in range(rows)]
        self.out = out
        self.prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:  # the first call carries the prompt
            self.prompt_seen = True
            return
        tokens = value.reshape(len(self.ids), -1).tolist()
        for row, toks in zip(self.ids, tokens, strict=False):
            row.extend(toks)
        self.out.put([self.tokenizer.decode(r, skip_special_tokens=True) for r in self.ids])

    def end(self) -> None:
        pass


class _StopOnEvent(StoppingCriteria):
    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


Messages = Sequence[Mapping[str, str]]  # a conversation: {"role": "system" | "user" | "assistant", "content": text}
Prompt = str | Messages  # a plain prompt, or (with chat) a whole conversation


def prompt_text(lm: LanguageModel, prompt: Prompt, chat: bool) -> str:
    """The text the model continues: the prompt itself, or the chat template applied to it (a message or a conversation).
    Raises ``TypeError``/``ValueError`` for anything else (so it also checks a prompt before it is queued)."""
    if isinstance(prompt, Mapping):  # one message of a list given as the prompts
        raise TypeError("a prompt must be a string or a conversation; got one message (a dict): a list of messages is one "
                        "conversation, so give the prompts as a list of conversations, [[message, …]], with chat=True")
    if not isinstance(prompt, str | list | tuple):
        raise TypeError(f"a prompt must be a string; got {type(prompt).__name__}")
    if isinstance(prompt, str):
        if "\x00" in prompt:
            raise ValueError("the prompt contains NUL bytes; is it binary data?")
        return lm.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                tokenize=False) if chat else prompt
    if not chat:
        raise TypeError("a conversation (a list of messages) needs the chat template: pass chat=True")
    if not prompt or not all(isinstance(m, Mapping) and isinstance(m.get("content"), str) for m in prompt):
        raise TypeError("a conversation is a non-empty list of {'role': ..., 'content': text} messages")
    if any("\x00" in m["content"] for m in prompt):
        raise ValueError("a message contains NUL bytes; is it binary data?")
    return lm.tokenizer.apply_chat_template([dict(m) for m in prompt], add_generation_prompt=True, tokenize=False)


def prompt_room(lm: LanguageModel, opts: SamplingOptions) -> int:
    """The most prompt tokens ``lm``'s context holds beside ``opts.max_new_tokens`` new ones."""
    return lm.context_length - opts.max_new_tokens


def prompt_ids(lm: LanguageModel, prompt: Prompt, chat: bool) -> list[int]:
    """The prompt's token ids as a decode reads them (after the chat template, where ``chat``)."""
    return lm.tokenizer(prompt_text(lm, prompt, chat), add_special_tokens=not chat).input_ids


def encode_prompts(lm: LanguageModel, prompts: Sequence[Prompt], opts: SamplingOptions) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ``(input_ids, attention_mask)``; prompts too long for the context are cut from the left."""
    tok = lm.tokenizer
    budget = prompt_room(lm, opts)
    rows: list[list[int]] = []
    for prompt in prompts:
        ids = prompt_ids(lm, prompt, opts.chat)
        if not ids:
            start = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
            if start is None:
                raise ValueError("the prompt is empty and the tokenizer has no BOS/EOS token to start from")
            ids = [start]
        if len(ids) > budget:
            warnings.warn(
                f"prompt of {len(ids)} tokens is longer than the context allows with {opts.max_new_tokens} new tokens "
                f"({lm.context_length}); keeping its last {budget} tokens (truncated from the left)",
                stacklevel=3,
            )
            ids = ids[-budget:]
        rows.append(ids)
    return padded(rows, tok.pad_token_id)


def padded(rows: Sequence[Sequence[int]], pad: int, *, left: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows padded with ``pad`` (on the left, or the right) to the longest, at least 1: ``(input_ids, mask)``."""
    width = max(1, *map(len, rows))
    fill = [[pad] * (width - len(r)) for r in rows]
    ids = [f + list(r) if left else list(r) + f for f, r in zip(fill, rows, strict=True)]
    mask = [[0] * len(f) + [1] * len(r) if left else [1] * len(r) + [0] * len(f) for f, r in zip(fill, rows, strict=True)]
    return torch.tensor(ids), torch.tensor(mask)


@dataclass(frozen=True)
class Generated:
    """Token ids of one batched call: left-padded prompts and the new tokens (padded after EOS)."""

    prompt_ids: torch.Tensor  # (B, P)
    prompt_mask: torch.Tensor  # (B, P)
    new_ids: torch.Tensor  # (B, N)
    new_mask: torch.Tensor  # (B, N): 1 up to and including the first EOS
    texts: list[str]


CANDIDATE_STRIDE = 0x9E3779B97F4A7C15 % 2**63  # candidate j of seed s samples with seed (s + j · stride) mod 2⁶³


def candidate_seed(seed: int, j: int) -> int:
    """The seed of candidate ``j`` of a row with ``seed`` under best-of-n (candidate 0 is the row's own sample)."""
    return (seed + j * CANDIDATE_STRIDE) % 2**63


def generate_tokens(
    lm: LanguageModel,
    prompts: Sequence[Prompt],
    settings: Sequence[Setting],
    seeds: Sequence[int],
    opts: SamplingOptions,
    streamer: BaseStreamer | None = None,
    stop: threading.Event | None = None,
    stopping: StoppingCriteria | None = None,
) -> Generated:
    """One batched ``generate`` call: row b uses ``prompts[b]``, ``settings[b]``, ``seeds[b]``.

    Keeps the token ids as well as the texts, for scoring the exact tokens that were sampled.
    ``stop`` (set: stop every row) and ``stopping`` (a transformers stopping criterion) end it early.
    With ``opts.best_of`` = n > 1 every row is sampled n times in the same batch (candidate j with seed
    :func:`candidate_seed`) and the candidate its own (steered) model finds most likely per token is kept, as
    OpenAI's ``best_of``; the streamer then hears nothing (the best candidate is known only at the end). With
    ``opts.guide`` = n > 1 the rows are decoded by :func:`lmswitch.core.guided.guided_tokens` (no streamer either).
    """
    opts.validate(check_model(lm))
    if opts.guide > 1:
        from lmswitch.core.guided import guided_tokens  # (it decodes its chunks with this module's helpers)

        return guided_tokens(lm, prompts, settings, seeds, opts, stop)
    n = opts.best_of
    if n == 1:
        return _decode(lm, prompts, settings, seeds, opts, streamer, stop, stopping)[0]
    if stopping is not None:
        raise ValueError("best_of > 1 cannot take a per-row stopping criterion (its rows are the candidates)")
    gen, sampler = _decode(lm, [p for p in prompts for _ in range(n)], [x for x in settings for _ in range(n)],
                           [candidate_seed(s, j) for s in seeds for j in range(n)], opts, None, stop, None, score=True)
    best = sampler.mean_loglik().view(len(prompts), n).argmax(1) + torch.arange(len(prompts)) * n
    return Generated(gen.prompt_ids[best], gen.prompt_mask[best], gen.new_ids[best], gen.new_mask[best],
                     [gen.texts[i] for i in best.tolist()])


def _decode(lm: LanguageModel, prompts: Sequence[Prompt] | tuple[torch.Tensor, torch.Tensor], settings: Sequence[Setting],
            seeds: Sequence[int], opts: SamplingOptions, streamer: BaseStreamer | None, stop: threading.Event | None,
            stopping: StoppingCriteria | None, score: bool = False, cache: DynamicCache | bool = True) -> tuple[Generated, CoupledSampler]:
    """:func:`generate_tokens` for one sample per row; ``prompts`` may be encoded already (left-padded ids and mask);
    ``score``: the sampler keeps each row's log-likelihood; ``cache``: the rows' KV cache of all but their last token
    (as :func:`shared_prompts` makes it), which the decode then extends in place; True: :func:`shared_prompts` is
    asked for one; False: none (each row's prompt is read whole)."""
    input_ids, mask = prompts if isinstance(prompts, tuple) else encode_prompts(lm, prompts, opts)
    tok = lm.tokenizer
    shared = shared_prompts(lm, input_ids, mask) if cache is True else (None if cache is False else cache)
    config = GenerationConfig(
        **({"use_cache": True} if shared is not None else {}),  # a shared prompt's cache is used whatever the model says
        max_new_tokens=opts.max_new_tokens,
        do_sample=False,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    eos = set(config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id]) - {None}
    criteria = [c for c in (_StopOnEvent(stop) if stop is not None else None, stopping) if c is not None]
    budget = Budget(len(prompts), opts.per_generation) if opts.per_generation is not None else None
    guard = RepeatGuard.of_prompts(input_ids, mask, opts.repeat_guard) if opts.repeat_guard else None
    sampler = CoupledSampler(seeds, opts.temperature, opts.top_p, budget, stops=sorted(eos) if score else None, guard=guard)
    with steer_rows(lm, settings, kl_budget=opts.budget, budget=budget, guard=guard), torch.inference_mode():
        out = lm.model.generate(
            input_ids=input_ids.to(lm.input_device),
            attention_mask=mask.to(lm.input_device),
            generation_config=config,
            logits_processor=LogitsProcessorList([sampler]),
            stopping_criteria=StoppingCriteriaList(criteria) if criteria else None,
            streamer=streamer,
            **({"past_key_values": shared} if shared is not None else {}),
        )
    new = out[:, input_ids.shape[1] :].cpu()
    is_eos = torch.isin(new, torch.tensor(sorted(eos), dtype=new.dtype)) if eos else torch.zeros_like(new, dtype=torch.bool)
    # valid: every token up to and including the first EOS
    new_mask = (is_eos.long().cumsum(-1) - is_eos.long()) == 0
    return Generated(input_ids, mask, new, new_mask.long(), [finished_text(tok, row) for row in new.tolist()]), sampler


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Each token's position in its left-padded row (padding: 1, masked out anyway)."""
    return (mask.long().cumsum(-1) - 1).masked_fill_(mask == 0, 1)


def plain_cache(lm: LanguageModel) -> DynamicCache | None:
    """A new KV cache for ``lm`` when its layers are plain per-layer ones, whose rows can be padded, merged and copied;
    None for sliding-window, hybrid or other layers."""
    cache = DynamicCache(config=lm.model.config)
    return cache if all(type(layer) is DynamicLayer for layer in cache.layers) else None


@torch.inference_mode()
def shared_prompts(lm: LanguageModel, input_ids: torch.Tensor, mask: torch.Tensor) -> DynamicCache | None:
    """The KV cache of every row's prompt but its last token, each distinct prompt read once by the body: rows that
    repeat a prompt (samples, settings of a sweep) share that work. Steering acts on the head's input only, so the body's
    cache is every setting's. None where no prompt repeats, the prompts are one token, the model's cache is not a plain
    per-layer one (:func:`plain_cache`) or its generation config names a cache of its own; then ``generate`` reads each
    row's prompt itself."""
    if input_ids.shape[1] < 2 or lm.model.generation_config.cache_implementation is not None:
        return None
    distinct, row_of = torch.unique(torch.cat([mask, input_ids * mask], dim=1), dim=0, return_inverse=True)
    cache = plain_cache(lm) if len(distinct) < len(input_ids) else None
    if cache is None:
        return None
    first = torch.full((len(distinct),), len(row_of)).scatter_reduce_(0, row_of, torch.arange(len(row_of)), "amin")
    ids, part = input_ids[first, :-1], mask[first, :-1]
    lm.final_hidden(ids, part, positions(part), cache=cache, unsteered=True)  # (whatever steering is open around the call)
    if not all(layer.is_initialized for layer in cache.layers):  # a layer that shares another's cache, or none
        return None
    for layer in cache.layers:  # (a model spread over devices keeps each layer's cache on its own)
        layer.batch_select_indices(row_of.to(layer.keys.device))
    return cache


def finished_text(tokenizer, ids: Sequence[int]) -> str:
    """The text of a finished generation: its new tokens decoded, less the end of a character that the length limit
    cut in two (its first bytes decode to "\ufffd"), so a text never ends in a broken character."""
    return tokenizer.decode(ids, skip_special_tokens=True).rstrip("\ufffd")


def generate(
    lm: LanguageModel,
    prompt: str | Sequence[str],
    switches: Setting = (),
    *,
    max_new_tokens: int = SAMPLING.max_new_tokens,
    temperature: float = SAMPLING.temperature,
    top_p: float = SAMPLING.top_p,
    seed: int = SEED,
    samples: int = SAMPLES,
    chat: bool = SAMPLING.chat,
    adaptive: bool = SAMPLING.adaptive,
    kl_budget: float | None = SAMPLING.kl_budget,
    generation_budget: float | None = SAMPLING.generation_budget,
    best_of: int = SAMPLING.best_of,
    guide: int = SAMPLING.guide,
    repeat_guard: int = SAMPLING.repeat_guard,
) -> list[str]:
    """Continuations of ``prompt`` steered by ``switches`` (pairs of switch and ε in ε0 units).

    Returns ``samples`` texts per prompt (prompt-major); sample k uses seed ``seed + k``,
    as the paper uses seeds 0…24 for 25 samples. One batched call. ``best_of=n`` keeps, for
    each sample, the likeliest of n candidates under the steered model (OpenAI's ``best_of``;
    on provocative prompts it cuts toxicity further at lower perplexity, EVALUATION.md). ``guide=n`` decodes
    five tokens at a time as n candidates and keeps the one the switch's judge likes best
    (:mod:`lmswitch.core.guided`: much stronger at a mild ε, without word loops). ``repeat_guard=n`` (default 4) keeps
    steering from raising any of each text's last n tokens, the cause of word loops (:mod:`lmswitch.core.guard`; 0: the
    paper's plain steering).

    >>> generate(lm, "The movie was", [(sentiment, 5)], seed=0)   # doctest: +SKIP
    [' absolutely wonderful, ...']
    """
    prompts = [prompt] if isinstance(prompt, str) else list(_checked_prompt(prompt))
    if not prompts:
        raise ValueError("no prompt given")
    check_samples(samples)
    check_seed(seed)
    rows = [p for p in prompts for _ in range(samples)]
    seeds = [seed + k for _ in prompts for k in range(samples)]
    opts = SamplingOptions(max_new_tokens, temperature, top_p, chat, adaptive, kl_budget, generation_budget, best_of, guide,
                           repeat_guard)
    return generate_tokens(lm, rows, [as_setting(switches)] * len(rows), seeds, opts).texts


def _checked_prompt(prompt: object) -> Sequence:
    if prompt is None or not isinstance(prompt, Sequence):
        raise ValueError(f"prompt must be a string or a list of prompts (a chat: a list of messages); got {type(prompt).__name__}")
    return prompt


def sweep(
    lm: LanguageModel,
    prompt: str,
    switch: Switch,
    eps_values: Sequence[float],
    seed: int = SEED,
    *,
    others: Setting = (),
    max_new_tokens: int = SAMPLING.max_new_tokens,
    temperature: float = SAMPLING.temperature,
    top_p: float = SAMPLING.top_p,
    chat: bool = SAMPLING.chat,
    adaptive: bool = SAMPLING.adaptive,
    kl_budget: float | None = SAMPLING.kl_budget,
    generation_budget: float | None = SAMPLING.generation_budget,
    best_of: int = SAMPLING.best_of,
    guide: int = SAMPLING.guide,
    repeat_guard: int = SAMPLING.repeat_guard,
) -> list[tuple[float, str]]:
    """The same prompt and seed at each ε of one switch, in one batched call (the paper's Table 5).

    ``others`` are further switches held fixed in every row.

    >>> sweep(lm, "I think that", detox, [-5, 0, 5])   # doctest: +SKIP
    [(-5.0, ' ...'), (0.0, ' ...'), (5.0, ' ...')]
    """
    eps_values = check_eps_values(eps_values, getattr(switch, "name", "the switch"))
    if not chat and isinstance(prompt, list | tuple) and all(isinstance(p, str) for p in prompt):
        raise TypeError(f"sweep continues one prompt; got a list of {len(prompt)}: sweep each prompt in turn")
    check_seed(seed)
    settings = [[(switch, e), *others] for e in eps_values]
    opts = SamplingOptions(max_new_tokens, temperature, top_p, chat, adaptive, kl_budget, generation_budget, best_of, guide,
                           repeat_guard)
    texts = generate_tokens(lm, [prompt] * len(eps_values), settings, [seed] * len(eps_values), opts).texts
    return list(zip(eps_values, texts, strict=False))


def stream_rows(
    lm: LanguageModel,
    prompt: str,
    settings: Sequence[Setting],
    *,
    seed: int = SEED,
    max_new_tokens: int = SAMPLING.max_new_tokens,
    temperature: float = SAMPLING.temperature,
    top_p: float = SAMPLING.top_p,
    chat: bool = SAMPLING.chat,
    adaptive: bool = SAMPLING.adaptive,
    kl_budget: float | None = SAMPLING.kl_budget,
    generation_budget: float | None = SAMPLING.generation_budget,
    best_of: int = SAMPLING.best_of,
    guide: int = SAMPLING.guide,
    repeat_guard: int = SAMPLING.repeat_guard,
    executor: Executor | None = None,
) -> Iterator[list[str]]:
    """Stream several settings of one prompt side by side (same seed): yields the texts so far, per row.

    Closing the iterator early stops the generation. The generation runs on a
    new thread, or on ``executor`` (e.g. a server's single long-lived compute
    thread: on a few CPU cores, OpenMP slows every thread down once several
    threads have used torch, so a server keeps all model work on one).
    """
    if not settings:
        raise ValueError("give at least one setting")
    check_seed(seed)
    opts = SamplingOptions(max_new_tokens, temperature, top_p, chat, adaptive, kl_budget, generation_budget, best_of, guide,
                           repeat_guard)
    with contextlib.closing(stream_tokens(lm, [prompt] * len(settings), settings, [seed] * len(settings), opts, executor=executor)) as items:
        last = None
        for item in items:
            texts = item.texts if isinstance(item, Generated) else item  # the last: the finished texts (finished_text)
            if texts != last:
                yield texts
            last = texts


def stream_tokens(lm: LanguageModel, prompts: Sequence[Prompt], settings: Sequence[Setting], seeds: Sequence[int],
                  opts: SamplingOptions, *, executor: Executor | None = None) -> Iterator[list[str] | Generated]:
    """:func:`generate_tokens` as a stream: the texts so far per row after every token, then the :class:`Generated`.

    Closing the iterator early stops the generation. It runs on a new thread, or on ``executor``.
    """
    opts.validate(check_model(lm))
    out: queue.Queue = queue.Queue()
    stop = threading.Event()
    done = object()

    def work() -> None:
        try:
            out.put(generate_tokens(lm, prompts, settings, seeds, opts, _RowStreamer(lm.tokenizer, len(prompts), out), stop))
        except BaseException as err:  # handed to the consumer
            out.put(err)
        finally:
            out.put(done)

    # the worker runs in a copy of this context; steering is entered inside it, so it never leaks
    context = contextvars.copy_context()
    if executor is not None:
        finished = executor.submit(context.run, work)
    else:
        thread = threading.Thread(target=context.run, args=(work,), daemon=True)
        thread.start()
    try:
        while (item := out.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        if executor is not None:
            finished.result()
        else:
            thread.join()


def stream_generate(lm: LanguageModel, prompt: str, switches: Setting = (), **options) -> Iterator[str]:
    """Like :func:`generate` for one prompt, yielding the text generated so far after every token.

    >>> for text in stream_generate(lm, "Once upon a time", [(sentiment, 5)]):   # doctest: +SKIP
    ...     print(text)
    """
    unknown = sorted(set(options) - set(inspect.signature(stream_rows).parameters) | set(options) & {"lm", "prompt", "settings"})
    if unknown:
        raise TypeError(f"stream_generate() got an unexpected keyword argument {unknown[0]!r}")
    for texts in stream_rows(lm, prompt, [as_setting(switches)], **options):
        yield texts[0]
