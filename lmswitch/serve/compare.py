"""The steered-vs-unsteered comparison a user watches: both outputs from one seed, their scores, the per-token changes.

:func:`compare` streams the two texts token by token (one batched call, so the
unsteered row is the same generation the steered one diverges from), then
scores both and explains the steered one. Results are cached on their content
(model, prompt, each switch's digest and ε, seed, sampling options), never on
object ids: a slider released in place is answered from the cache, and moving a
slider reuses the unsteered output.

>>> for item in compare(lm, "My weekend was", [(sentiment, 6)], seed=0):   # doctest: +SKIP
...     print(item.steered)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from lmswitch.core.generate import stream_rows
from lmswitch.core.hidden import encoded_continuation
from lmswitch.core.models import LanguageModel
from lmswitch.core.options import SAMPLING, SEED, SamplingOptions
from lmswitch.core.steering import Setting
from lmswitch.harness.evaluate import TextScores, text_scores
from lmswitch.lenses.spans import TokenChange, token_changes
from lmswitch.serve.batcher import Batcher, Row
from lmswitch.serve.compute import ComputeThread, until

MAX_CACHED = 64  # comparisons (and unsteered outputs) kept; each is a few kB of text and scores


@dataclass(frozen=True)
class Partial:
    """The two outputs so far, while they stream."""

    steered: str
    unsteered: str


@dataclass(frozen=True)
class Comparison:
    """Both finished outputs (same prompt and seed), their scores and what the switches changed per token."""

    setting: dict[str, float]  # switch name -> ε, the switches that were on
    steered: str
    unsteered: str
    steered_scores: TextScores
    unsteered_scores: TextScores
    changes: list[TokenChange] | None  # None when not asked for, or nothing was steered

    def to_dict(self) -> dict:
        """The ``/generate`` endpoint's JSON."""
        return {"setting": dict(self.setting), "steered": self.steered, "unsteered": self.unsteered,
                "scores": {"steered": self.steered_scores.to_dict(), "unsteered": self.unsteered_scores.to_dict()}}


class ComparisonCache:
    """A thread-safe LRU of finished comparisons and unsteered outputs, keyed on content."""

    def __init__(self, size: int = MAX_CACHED) -> None:
        self.size = size
        self._items: OrderedDict[tuple, object] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> object | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: tuple, value: object) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def _keys(lm: LanguageModel, prompt: str, setting: Setting, seed: int, options: SamplingOptions) -> tuple[tuple, tuple]:
    """(key of the unsteered output, key of the whole comparison): content only."""
    base = ("unsteered", lm.fingerprint, prompt, seed, options)
    switches = tuple((s.name, s.digest, float(e)) for s, e in setting if e)
    return base, ("comparison", *base[1:], switches)


def _call(compute: ComputeThread | None, fn, *args, **kwargs):
    return compute.run(fn, *args, **kwargs) if compute is not None else fn(*args, **kwargs)


def _finish(lm: LanguageModel, prompt: str, setting: Setting, outputs: list[str | Row], base: tuple[str, TextScores] | None,
            options: SamplingOptions, changes: bool, compute: ComputeThread | None, batcher: Batcher | None) -> Comparison:
    """Score the finished outputs (steered, then unsteered unless ``base`` has it from the cache; :class:`Row` objects
    with ``batcher``, which scores them from their decode) and explain the steered one."""
    texts = [_text(x) for x in outputs]
    steered, base_text = texts[0], (base[0] if base else texts[-1])
    scores = (batcher.scores(prompt, outputs, chat=options.chat) if batcher is not None
              else _call(compute, text_scores, lm, prompt, texts, chat=options.chat))
    base_scores = base[1] if base else scores[-1]
    per_token = None
    if changes and setting and steered:
        row = outputs[0]
        encoded = encoded_continuation(lm, steered, row.text_ids, row.hidden) if isinstance(row, Row) and row.hidden is not None else None
        per_token = _call(compute, token_changes, lm, setting, steered, prompt=prompt, chat=options.chat, encoded=encoded)
    return Comparison({s.name: float(e) for s, e in setting}, steered, base_text, scores[0], base_scores, per_token)


def _text(output: str | Row) -> str:
    return output.text if isinstance(output, Row) else output


def _batched_rows(batcher: Batcher, prompt: str, rows: list[Setting], seed: int, options: SamplingOptions,
                  stop: threading.Event | None) -> Iterator[list[str | Row]]:
    """Like :func:`~lmswitch.core.generate.stream_rows`, through ``batcher``: every row's text so far after each token,
    or its :class:`Row` once finished; ``stop`` set drops the rows (a guided or best-of-n decode, whose reader waits
    for its end, stops early)."""
    streams = [batcher.stream(prompt, row, seed=seed, options=options, cancel=stop) for row in rows]
    outputs: list[str | Row] = [""] * len(rows)
    try:
        while not all(isinstance(x, Row) for x in outputs):
            for i, stream in enumerate(streams):
                if not isinstance(outputs[i], Row):
                    item = next(stream, None)
                    if item is None:  # dropped (``stop``) while it waited for a decode
                        return
                    outputs[i] = item
            yield list(outputs)
    finally:
        for stream in streams:
            stream.close()


def compare(
    lm: LanguageModel,
    prompt: str,
    setting: Sequence[tuple],
    *,
    seed: int = SEED,
    options: SamplingOptions = SAMPLING,
    cache: ComparisonCache | None = None,
    compute: ComputeThread | None = None,
    stop: threading.Event | None = None,
    changes: bool = True,
    batcher: Batcher | None = None,
) -> Iterator[Partial | Comparison]:
    """Stream the steered and the unsteered output of ``prompt`` side by side, then yield the :class:`Comparison`.

    ``setting`` is a list of (switch, ε); switches at ε 0 are left out. With
    ``stop`` set (e.g. by a newer request of the same user) the stream ends at the
    next token and nothing more is yielded. ``compute`` runs all model work on a
    server's compute thread; with ``batcher`` (a server's), the rows are decoded
    and scored together with other users' requests.
    """
    setting = [(s, float(e)) for s, e in setting if e]
    base_key, key = _keys(lm, prompt, setting, seed, options)
    done = cache.get(key) if cache is not None else None
    if isinstance(done, Comparison) and (done.changes is not None or not (changes and setting and done.steered)):
        yield done
        return
    cached_base = cache.get(base_key) if cache is not None and setting else None
    rows = [setting] if cached_base else [setting, []] if setting else [[]]
    outputs: list[str | Row] = [""]
    stream = (_batched_rows(batcher, prompt, rows, seed, options, stop) if batcher is not None
              else stream_rows(lm, prompt, rows, seed=seed, executor=compute, **options.to_dict()))
    for outputs in until(stop or threading.Event(), stream):
        yield Partial(_text(outputs[0]), cached_base[0] if cached_base else _text(outputs[-1]))
    if stop is not None and stop.is_set():
        return
    result = _finish(lm, prompt, setting, outputs, cached_base, options, changes, compute, batcher)
    if cache is not None:
        cache.put(base_key, (result.unsteered, result.unsteered_scores))
        cache.put(key, result)
    yield result
