"""Read a switch: its SVD word dimensions and the words it promotes (paper §5.1, appendix G).

With the switch acting as ``c → c + ε W c``, the change of word ``v``'s logit is
``ε · e_vᵀ W c`` (times the family's after-head scale: Granite's, Cohere's; 1 for most). Writing ``W = U S Vᵀ``:

    e_vᵀ W c = Σ_i s_i · (e_vᵀ u_i) · (v_iᵀ c)

so ``u_i`` is the *word side* of direction ``i`` (it meets the output embedding
``e_v``) and ``v_i`` its *context side* (it meets the hidden state ``c``). A
direction raises the words at its ``+u_i`` pole when ``v_iᵀ c > 0`` and the words at
its ``−u_i`` pole when ``v_iᵀ c < 0``; which one happens at positive ε is decided
from the hidden states of real reference texts, not guessed.

Every word list ranks first the words the model writes at least occasionally after the reference texts (mean
next-token probability at least :data:`WRITTEN_SHARE` of uniform; :func:`written_words`). A switch also moves code
tokens, word pieces and rare names that the model almost never writes, and in a switch learned from little text (one
article) those can top a list by their logit change alone ("clf", "setattr" for an article on homework, "QtGui" for
one on night trains). They are listed only where too few written words remain.
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import asdict, dataclass

import torch
from safetensors.torch import load_file, save_file

from lmswitch.core.hidden import encode_texts
from lmswitch.core.models import LanguageModel, cache_dir
from lmswitch.core.options import TrainConfig
from lmswitch.core.pause import pause_point
from lmswitch.core.switch import Switch, check_switch
from lmswitch.io.atomic import write_file
from lmswitch.io.resources import read_data_text
from lmswitch.lenses.options import DEFAULT_DIMS, DEFAULT_WORDS, check_counts
from lmswitch.lenses.vocab import token_words, word_forms

WRITTEN_SHARE = 0.02  # a listed word's mean probability after the reference contexts, as a share of uniform (1 / V);
# set by reading the lists of the shipped switches and of one-article switches (EVALUATION.md, twenty-second session)

_REFERENCE_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_WRITTEN_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


RARE_MARK = "†"  # after a listed word the model rarely writes (WordScore.shown, WordDelta.shown)
RARE_NOTE = f"{RARE_MARK} = a word the model rarely writes, listed after the others"


class _Listed:
    """What a listed word shows: the word, marked :data:`RARE_MARK` when the model rarely writes it (those are listed
    after all the others, so a list's scores jump back up where they start)."""

    word: str
    written: bool

    @property
    def shown(self) -> str:
        return self.word if self.written else self.word + RARE_MARK


@dataclass(frozen=True)
class WordScore(_Listed):
    """A word at one pole of a direction and its oriented score ``e_vᵀ u_i · sign_i`` (rounded to 6 places)."""

    word: str
    score: float
    written: bool = True  # the model writes it at least occasionally (written_words); False: listed after those


@dataclass(frozen=True)
class WordDelta(_Listed):
    """A word and the mean change of its logit over the reference contexts at ε = 1 (one ε0), rounded to 6 places."""

    word: str
    delta: float
    written: bool = True  # the model writes it at least occasionally (written_words); False: listed after those


@dataclass(frozen=True)
class Dimension:
    """One singular direction of ``W``, oriented by the reference contexts (see :func:`svd_dimensions`)."""

    index: int
    singular_value: float
    share: float  # σ_i² / Σσ²: its share of ‖W‖²
    flipped: bool  # positive ε raises the −u pole
    agreement: float  # share of reference contexts where the direction acts that way round
    strength: float  # s_i · |mean v_iᵀ c| · ε0: the typical size of the head input's change along u_i at ε = 1
    promoted: list[WordScore]  # pushed up at positive ε: the words the model writes strongest first, then the rest
    suppressed: list[WordScore]  # pushed down at positive ε, in the same order


@dataclass(frozen=True)
class Dimensions:
    """What :func:`svd_dimensions` found. :meth:`to_dict` gives the plain JSON-ready dict (rows as dicts)."""

    switch: str
    positive_label: str
    negative_label: str
    singular_values: list[float]  # all of them, descending
    dimensions: list[Dimension]  # the top ones asked for, up to the switch's rank
    reference_contexts: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class WordChanges:
    """What :func:`promoted_words` found. :meth:`to_dict` gives the plain JSON-ready dict."""

    switch: str
    positive_label: str
    negative_label: str
    promoted: list[WordDelta]  # the words the model writes largest rise first, then the rest (written_words)
    suppressed: list[WordDelta]  # the same, largest fall first (negative deltas)
    reference_contexts: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Axis:
    """One of the two directions a :class:`WordMap` is drawn on."""

    index: int
    singular_value: float
    share: float
    flipped: bool


@dataclass(frozen=True)
class WordPoint:
    """A word on the map: ``x``, ``y`` its oriented scores on directions 0 and 1, ``group`` the list it came from."""

    word: str
    x: float
    y: float
    group: str  # one of GROUPS


@dataclass(frozen=True)
class WordMap:
    """What :func:`word_map` found. :meth:`to_dict` gives the plain JSON-ready dict."""

    switch: str
    positive_label: str
    negative_label: str
    axes: list[Axis]
    points: list[WordPoint]
    reference_contexts: int

    def to_dict(self) -> dict:
        return asdict(self)


def reference_texts() -> list[str]:
    """The bundled neutral reference texts (everyday prose on many topics, written for this project)."""
    text = read_data_text("reference.txt")
    return [line.strip() for line in text.splitlines() if line.strip()]


def reference_hidden(lm: LanguageModel, texts: list[str] | None = None) -> torch.Tensor:
    """Head inputs ``c`` over reference texts, ``(N, d)`` float32.

    The bundled set's states are cached per model, in memory and on disk under
    :func:`~lmswitch.core.models.cache_dir` (keyed by weights, dtype and text).
    """
    if texts is None:
        cached = _REFERENCE_CACHE.get(lm)
        if cached is None:
            cached = _REFERENCE_CACHE[lm] = _bundled_reference_hidden(lm)
        return cached
    texts = [t for t in texts if isinstance(t, str) and t.strip()]
    if not texts:
        raise ValueError("give at least one non-empty reference text")
    return encode_texts(lm, texts, [0.0] * len(texts), chunk_tokens=TrainConfig().chunk_tokens).hidden  # as training reads text


def _bundled_reference_hidden(lm: LanguageModel) -> torch.Tensor:
    texts = reference_texts()
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:12]
    dtype = str(lm.model.dtype).removeprefix("torch.")
    path = cache_dir() / "lens" / f"reference-{lm.fingerprint}-{dtype}-{digest}.safetensors"
    try:
        hidden = load_file(str(path))["hidden"]
        if hidden.ndim == 2 and hidden.shape[1] == lm.hidden_size and torch.isfinite(hidden).all():
            return hidden.to(lm.head_weight().device)
    except (OSError, KeyError, RuntimeError, ValueError):
        pass  # missing or damaged: recompute
    hidden = reference_hidden(lm, texts)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, lambda tmp: save_file({"hidden": hidden.float().cpu().contiguous()}, tmp))
    except OSError:
        pass  # a read-only cache only costs time
    return hidden


def _word_table(lm: LanguageModel) -> tuple[torch.Tensor, list[str]]:
    """Ids and surfaces of the readable word-start tokens of the model's vocabulary."""
    tw = token_words(lm.tokenizer)
    vocab = lm.vocab_size
    ids = [i for i in tw.readable_ids() if i < vocab]
    if not ids:
        raise ValueError(f"the tokenizer of {lm.name} has no readable word tokens to list")
    return torch.tensor(ids), [tw.surface[i] for i in ids]


def written_words(lm: LanguageModel, reference: list[str] | None = None) -> torch.Tensor:
    """``(V,)`` bool: the words whose mean next-token probability after the reference contexts is at least
    :data:`WRITTEN_SHARE` / V, the words the model writes at least occasionally (what passes on the embedded model:
    EVALUATION.md, twenty-second session)."""
    return _written(lm, reference_hidden(lm, reference), bundled=reference is None)


@torch.no_grad()
def _written(lm: LanguageModel, C: torch.Tensor, bundled: bool) -> torch.Tensor:
    """:func:`written_words` after the contexts ``C`` (N, d); kept per model for the bundled texts, until the bar or
    the head's weight changes."""
    weight = lm.head.weight
    key = (WRITTEN_SHARE, weight.data_ptr(), weight._version)
    if bundled and lm in _WRITTEN_CACHE and _WRITTEN_CACHE[lm][0] == key:
        return _WRITTEN_CACHE[lm][1]
    total = sum(_probability_sum(lm, chunk) for chunk in C.split(256))
    written = total / len(C) >= WRITTEN_SHARE / total.numel()
    if bundled:
        _WRITTEN_CACHE[lm] = (key, written)
    return written


def _probability_sum(lm: LanguageModel, C: torch.Tensor) -> torch.Tensor:
    """``(V,)`` float64: the next-token probabilities after the contexts ``C`` summed; a pause point first (a server's
    other users go first)."""
    pause_point()
    return lm.logits_from_hidden(C).softmax(-1).sum(0, dtype=torch.float64).cpu()


def _top_words(lm: LanguageModel, rankings: torch.Tensor, ids: torch.Tensor, surfaces: list[str], n: int,
               written: torch.Tensor) -> list[list[tuple[int, str]]]:
    """For each row of ``rankings`` (k, n_words): the word-table index and the shown form of its ``n`` highest-scoring
    distinct whole words (case-insensitive; the best-scoring form is kept), best first; the words the model writes
    (``written``, (V,) bool: :func:`written_words`) before all others.

    Candidates are read with :func:`~lmswitch.lenses.vocab.word_forms` (no word pieces; a contraction joined) in that
    order, a little more than needed at a time and for all rows in one batched
    call, so only the top of each ranking costs model time.
    """
    order = torch.argsort(rankings, dim=1, descending=True, stable=True)
    rare = (~written[ids])[order].to(torch.uint8)  # then every written word before every rare one, each group in order
    orders = order.gather(1, torch.argsort(rare, dim=1, stable=True)).tolist()
    outs: list[list[tuple[int, str]]] = [[] for _ in orders]
    seen: list[set[str]] = [set() for _ in orders]
    pos = [0] * len(orders)
    while True:
        pause_point()
        pending: list[tuple[int, int]] = []  # (row, word index)
        for r, order in enumerate(orders):
            want = n - len(outs[r])
            taken: set[str] = set()
            while want > 0 and len(taken) < want + want // 2 + 5 and pos[r] < len(order):
                j = order[pos[r]]
                pos[r] += 1
                w = surfaces[j].lower()
                if w not in seen[r] and w not in taken:
                    taken.add(w)
                    pending.append((r, j))
        if not pending:
            return outs
        forms = word_forms(lm, [int(ids[j]) for _, j in pending])
        for (r, j), form in zip(pending, forms, strict=True):
            w = surfaces[j].lower()
            if form is not None and w not in seen[r] and len(outs[r]) < n:
                seen[r].add(w)
                outs[r].append((j, form))


def _listed(rankings: torch.Tensor, ids: torch.Tensor, written: torch.Tensor, rows: list[list[tuple[int, str]]],
            entry: type[WordScore] | type[WordDelta]) -> list[list]:
    """``entry(word, score, written)`` for the words :func:`_top_words` chose, score rounded to 6 places."""
    return [[entry(form, round(float(rankings[r, j]), 6), bool(written[ids[j]])) for j, form in row] for r, row in enumerate(rows)]


@dataclass
class _Directions:
    """The switch's top singular directions, oriented by the reference contexts."""

    S: torch.Tensor  # (d,) all singular values, descending
    sign: torch.Tensor  # (k,) +1, or -1 where positive ε raises the −u pole
    mean: torch.Tensor  # (k,) mean context term v_iᵀ c over the reference
    agreement: torch.Tensor  # (k,) share of reference contexts where the direction acts that way round
    oriented: torch.Tensor  # (k, n_words): e_vᵀ u_i · sign_i, positive = pushed up at positive ε
    ids: torch.Tensor  # (n_words,) token ids of the word table
    surfaces: list[str]
    written: torch.Tensor  # (V,) bool: the words the model writes after the reference contexts
    contexts: int  # reference contexts used


def _directions(lm: LanguageModel, switch: Switch, k: int, reference: list[str] | None) -> _Directions:
    """SVD of ``W`` and the orientation of its top ``k`` directions (see the module docstring)."""
    switch.check_model(lm)
    W = switch.W.double()
    U, S, Vh = torch.linalg.svd(W)  # W = U diag(S) Vh; columns of U: word side, rows of Vh: context side
    pause_point()  # the Inspect tab's lenses take ~0.5 s in all: a server's other users go first at these points
    k = min(k, len(S))
    C = reference_hidden(lm, reference).double().to(W.device)  # (N, d)
    a = C @ Vh[:k].T  # (N, k): context terms v_iᵀ c
    mean = a.mean(0)
    sign = torch.where(mean < 0, -1.0, 1.0).double()
    agreement = ((a * sign) > 0).double().mean(0)
    ids, surfaces = _word_table(lm)
    E = lm.head_weight()[ids].double().cpu()  # (n_words, d)
    proj = E @ U[:, :k].cpu()  # (n_words, k): e_vᵀ u_i
    oriented = (proj * sign.cpu()).T  # (k, n_words)
    return _Directions(S=S, sign=sign, mean=mean, agreement=agreement, oriented=oriented, ids=ids, surfaces=surfaces,
                       written=_written(lm, C, bundled=reference is None), contexts=int(C.shape[0]))


@torch.no_grad()
def svd_dimensions(lm: LanguageModel, switch: Switch, *, dims: int = DEFAULT_DIMS, words: int = DEFAULT_WORDS, reference: list[str] | None = None) -> Dimensions:
    """The switch's top ``dims`` singular directions, each with ``words`` words at each pole; fewer when the switch's
    rank is lower (a direction whose singular value is numerically zero, :data:`NULL_DIRECTION`, is not listed).

    Every :class:`Dimension` is oriented so that ``promoted`` lists the words it
    pushes *up* at positive ε over the reference contexts and ``suppressed`` the
    words it pushes down. ``flipped`` says whether that is the ``−u`` pole;
    ``agreement`` is the share of reference contexts where the direction acts that
    way round (near 0.5: it promotes either pole depending on the context);
    ``strength`` is ``s_i · |mean v_iᵀ c| · ε0``, the typical size of the head input's change along ``u_i`` at ε = 1.

    >>> d = svd_dimensions(lm, sentiment)                 # doctest: +SKIP
    >>> [w.word for w in d.dimensions[0].promoted[:3]]    # doctest: +SKIP
    ['wonderful', 'great', 'love']
    """
    check_counts(dims, words)
    check_switch(switch, lm)
    switch.check_steers("it has no directions to list")
    dirs = _directions(lm, switch, dims, reference)
    S, k = dirs.S, len(dirs.sign)
    live = sum(float(S[i]) > NULL_DIRECTION * float(S[0]) for i in range(k))  # past the switch's rank: noise, not listed
    total = float((S**2).sum()) or 1.0
    rankings = torch.cat([dirs.oriented, -dirs.oriented])
    chosen = _top_words(lm, rankings, dirs.ids, dirs.surfaces, words, dirs.written)
    lists = _listed(rankings, dirs.ids, dirs.written, chosen, WordScore)
    directions = [
        Dimension(
            index=i,
            singular_value=float(S[i]),
            share=float(S[i] ** 2) / total,
            flipped=bool(dirs.sign[i] < 0),
            agreement=float(dirs.agreement[i]),
            strength=float(S[i] * dirs.mean[i].abs() * switch.eps0),
            promoted=lists[i],
            suppressed=lists[k + i],
        )
        for i in range(live)
    ]
    return Dimensions(switch=switch.name, positive_label=switch.positive_label, negative_label=switch.negative_label,
                      singular_values=S.tolist(), dimensions=directions, reference_contexts=dirs.contexts)


@torch.no_grad()
def promoted_words(lm: LanguageModel, switch: Switch, *, words: int = DEFAULT_WORDS, reference: list[str] | None = None) -> WordChanges:
    """The words whose logits the switch raises and lowers most at positive ε, on average over contexts.

    The mean logit change over reference contexts is ``ε · e_vᵀ W c̄`` (linear in
    ``c``); each :class:`WordDelta`'s ``delta`` is that change at ε = 1 (one ε0).
    Within one context a constant shift of all logits does not change
    probabilities, so the ranking is also the ranking of the mean change in
    log-probability. Words the model writes come first (:func:`written_words`).

    >>> w = promoted_words(lm, sentiment, words=5)            # doctest: +SKIP
    >>> [x.word for x in w.promoted], [x.word for x in w.suppressed]  # doctest: +SKIP
    """
    check_counts(1, words)
    check_switch(switch, lm).check_steers("it raises and lowers no words")
    C = reference_hidden(lm, reference)
    c_mean = C.double().mean(0).to(switch.W.device)
    direction = switch.W.double() @ c_mean * switch.eps0  # (d,)
    ids, surfaces = _word_table(lm)
    E = lm.head_weight()[ids].double().cpu()  # (n_words, d)
    delta = E @ direction.cpu() * lm.logit_scale  # in logits: the family's after-head scale too
    rankings = torch.stack([delta, -delta])
    written = _written(lm, C, bundled=reference is None)
    up, down = _listed(rankings, ids, written, _top_words(lm, rankings, ids, surfaces, words, written), WordDelta)
    return WordChanges(switch=switch.name, positive_label=switch.positive_label, negative_label=switch.negative_label,
                       promoted=up, suppressed=[WordDelta(w.word, -w.delta, w.written) for w in down],
                       reference_contexts=int(C.shape[0]))


NULL_DIRECTION = 1e-5  # a singular value below this share of the largest one is numerical noise, not a direction
GROUPS = ("promoted 1", "suppressed 1", "promoted 2", "suppressed 2")


def _map_points(dirs: _Directions, chosen: list[list[tuple[int, str]]], live: list[bool]) -> list[WordPoint]:
    """The chosen words of the live directions' poles as points, each word once (in its first group)."""
    k = len(dirs.sign)
    points: list[WordPoint] = []
    seen: set[str] = set()
    for i in range(2):
        if not live[i]:
            continue
        for group, row in ((GROUPS[2 * i], chosen[i]), (GROUPS[2 * i + 1], chosen[k + i])):
            for j, word in row:
                if word.lower() in seen:
                    continue
                seen.add(word.lower())
                x = round(float(dirs.oriented[0, j]), 6)
                y = round(float(dirs.oriented[1, j]), 6) if live[1] else 0.0
                points.append(WordPoint(word=word, x=x, y=y, group=group))
    return points


@torch.no_grad()
def word_map(lm: LanguageModel, switch: Switch, *, words: int = 15, reference: list[str] | None = None) -> WordMap:
    """Words placed on the switch's top two SVD directions, for a scatter plot.

    The points are the top ``words`` promoted and suppressed words of directions 0
    and 1, oriented as :func:`svd_dimensions` orients them: a :class:`WordPoint`'s
    ``x`` is the word's score on direction 0 and ``y`` on direction 1 (``e_vᵀ u_i``,
    signed so that positive means pushed up at positive ε). A word on several
    lists appears once, in the first of the groups ``promoted 1``, ``suppressed 1``,
    ``promoted 2``, ``suppressed 2``. A direction whose singular value is
    numerically zero (a rank-1 switch's second) lists no words and puts every ``y`` at 0.

    >>> m = word_map(lm, sentiment)                                  # doctest: +SKIP
    >>> [(p.word, p.x) for p in m.points if p.group == "promoted 1"]  # doctest: +SKIP
    """
    check_counts(2, words)
    switch.check_steers("it has no directions to map")
    dirs = _directions(lm, switch, 2, reference)
    S = dirs.S
    live = [i < len(dirs.sign) and float(S[i]) > NULL_DIRECTION * float(S[0]) for i in range(2)]
    rankings = torch.cat([dirs.oriented, -dirs.oriented])  # rows: promoted 0..k-1, then suppressed 0..k-1
    points = _map_points(dirs, _top_words(lm, rankings, dirs.ids, dirs.surfaces, words, dirs.written), live)
    total = float((S**2).sum())
    axes = [
        Axis(
            index=i,
            singular_value=float(S[i]) if i < len(S) else 0.0,
            share=float(S[i] ** 2) / total if i < len(S) else 0.0,
            flipped=bool(live[i] and dirs.sign[i] < 0),
        )
        for i in range(2)
    ]
    return WordMap(switch=switch.name, positive_label=switch.positive_label, negative_label=switch.negative_label,
                   axes=axes, points=points, reference_contexts=dirs.contexts)
