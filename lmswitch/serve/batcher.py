"""Many users, one model: concurrent generation requests merged into batched decodes on the compute thread.

Each request has its own prompt, switches and ε, seed and length; requests that
share the sampling settings (temperature, top-p, chat, adaptive strength) are
decoded together as rows of one :func:`~lmswitch.core.generate.generate_tokens`
call, each row with its own steering and its own random stream. A request that
arrives while a batch runs joins the next one. A row's tokens are the ones the
request would get alone (same seed), up to the floating-point effects of
batching; its text stops at its own length.

Over capacity (``max_waiting`` requests already waiting) :meth:`Batcher.stream`
raises :class:`Busy` at once, so no one waits silently until a timeout.

>>> batcher = Batcher(lm, ComputeThread())                                            # doctest: +SKIP
>>> *partial, done = batcher.stream("My weekend was", [(sentiment, 6)], seed=1, options=SamplingOptions())  # doctest: +SKIP
>>> done.text                                                                           # doctest: +SKIP
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import torch
from transformers import StoppingCriteria
from transformers.generation.streamers import BaseStreamer

from lmswitch.core.generate import Prompt, generate_tokens
from lmswitch.core.models import LanguageModel
from lmswitch.core.options import SamplingOptions
from lmswitch.core.steering import Setting, check_setting
from lmswitch.serve.compute import ComputeThread

MAX_BATCH = 8  # rows decoded together
MAX_WAITING = 32  # requests waiting for a batch; one more gets Busy


class Busy(RuntimeError):
    """The server holds as many waiting requests as it takes; retry in a moment."""


@dataclass(frozen=True)
class Row:
    """A finished request: its text, its new token ids (up to and including an end-of-sequence token) and prompt size."""

    text: str
    new_ids: list[int]
    prompt_tokens: int
    ended: bool  # the model ended the text (end-of-sequence) before the length limit


@dataclass(eq=False)
class _Request:
    prompt: Prompt
    setting: Setting
    seed: int
    options: SamplingOptions
    out: queue.Queue = field(default_factory=queue.Queue)
    gone: threading.Event = field(default_factory=threading.Event)  # the caller stopped reading

    @property
    def key(self) -> tuple:
        """Requests with the same key can share a batch (one sampler temperature and top-p, one template, one KL cap)."""
        o = self.options
        return o.temperature, o.top_p, o.chat, o.adaptive, o.kl_budget


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
    """Stops the decode once every request in it has stopped reading."""

    def __init__(self, requests: list[_Request]) -> None:
        self.requests = requests

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        gone = all(r.gone.is_set() for r in self.requests)
        return torch.full((input_ids.shape[0],), gone, dtype=torch.bool, device=input_ids.device)


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
        if isinstance(item, BaseException):
            self.close()
            raise item
        if isinstance(item, Row):
            self.close()
        return item

    def close(self) -> None:
        self.request.gone.set()

    __del__ = close


class Batcher:
    """Merges concurrent generation requests into batched decodes on ``compute``'s thread."""

    def __init__(self, lm: LanguageModel, compute: ComputeThread, max_batch: int = MAX_BATCH, max_waiting: int = MAX_WAITING) -> None:
        self.lm, self.compute = lm, compute
        self.max_batch, self.max_waiting = max_batch, max_waiting
        self.waiting: list[_Request] = []
        self.lock = threading.Lock()
        self.scheduled = False
        self.batches = 0  # decodes run so far, and the rows in them (the load benchmark reads these)
        self.rows = 0

    def stream(self, prompt: Prompt, setting: Setting, *, seed: int, options: SamplingOptions) -> Iterator[str | Row]:
        """The request's text so far after each new token, then its :class:`Row`. Checked at once: bad values raise
        ``ValueError``/``TypeError``, a full queue :class:`Busy`. Closing the iterator drops the request's row."""
        options.validate(self.lm)
        check_setting(self.lm, setting)
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
            raise ValueError(f"seed must be a non-negative integer; got {seed!r}")
        request = _Request(prompt, list(setting), seed, options)
        with self.lock:
            if len(self.waiting) >= self.max_waiting:
                raise Busy(f"the server is busy ({len(self.waiting)} requests waiting); retry in a few seconds")
            self.waiting.append(request)
            self._schedule()
        return _Stream(request)

    def generate(self, prompt: Prompt, setting: Setting, *, seed: int, options: SamplingOptions) -> Row:
        """:meth:`stream` to the end: the finished :class:`Row`."""
        *_, row = self.stream(prompt, setting, seed=seed, options=options)
        return row

    def _schedule(self) -> None:  # with self.lock held
        if self.waiting and not self.scheduled:
            self.scheduled = True
            self.compute.submit(self._run_batch)

    def _take(self) -> list[_Request]:
        """The oldest waiting request and up to ``max_batch - 1`` more that can share its batch, in arrival order."""
        with self.lock:
            self.waiting = [r for r in self.waiting if not r.gone.is_set()]
            if not self.waiting:
                return []
            key = self.waiting[0].key
            batch = [r for r in self.waiting if r.key == key][: self.max_batch]
            self.waiting = [r for r in self.waiting if r not in batch]
            return batch

    def _run_batch(self) -> None:
        """On the compute thread: decode one batch, hand out the rows, and schedule the next batch if any wait."""
        batch = self._take()
        try:
            if batch:
                self._decode(batch)
        except BaseException as err:  # every request of the batch hears of it; the batcher keeps serving
            for request in batch:
                request.out.put(err)
        finally:
            with self.lock:
                self.scheduled = False
                self._schedule()

    def _decode(self, batch: list[_Request]) -> None:
        self.batches, self.rows = self.batches + 1, self.rows + len(batch)
        longest = max(r.options.max_new_tokens for r in batch)
        options = replace(batch[0].options, max_new_tokens=longest)
        dispatch = _Dispatch(self.lm, batch)
        generated = generate_tokens(self.lm, [r.prompt for r in batch], [r.setting for r in batch], [r.seed for r in batch], options,
                                    dispatch, stopping=_AllGone(batch))
        for b, (request, ids) in enumerate(zip(batch, dispatch.ids, strict=True)):
            ended = bool(ids) and ids[-1] == dispatch.eos
            text = self.lm.tokenizer.decode(ids, skip_special_tokens=True)
            request.out.put(Row(text, ids, int(generated.prompt_mask[b].sum()), ended))
