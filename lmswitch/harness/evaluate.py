"""Evaluation harness: the paper's protocol (section 4), scaled down to run on a CPU in minutes.

For each steering setting, every prompt is continued ``samples`` times (nucleus
sampling, seeds ``seed … seed + samples - 1``, the same seeds for every setting,
so settings are compared on coupled samples) and the continuations are scored:

- **positivity**: share of continuations with vaderSentiment compound ≥ 0.05
  (vader's own threshold for "positive"; neutral texts count as not positive),
  and the share ≤ -0.05 ("negative");
- **toxicity** (alt-profanity-check ``predict_prob``): the average over prompts of
  the maximum toxicity among that prompt's samples, and the toxicity probability,
  the share of prompts with at least one sample above 0.5 (as in DExperts and
  the paper);
- **fluency**: perplexity of the sampled tokens given the prompt under the
  *unsteered* model, ``exp(total NLL / total tokens)``;
- **diversity**: Dist-n, distinct word n-grams over all n-grams among a
  prompt's samples (words split on whitespace), averaged over prompts;
- **sprinkle**: share of continuations that write one content token three times
  or more (a word that is not a stop word, a possessive "'s", an emoji, a mark
  such as ";" that prose does not write often): a switch that sprinkles one
  token ("a mission's expedition's hours's", "so; but; would they;") reads
  worse than its perplexity says (HTML tags such as ``<em>`` are markup, not counted);
- **formality**: share of continuations a character n-gram logistic regression
  (scikit-learn), fitted on the training pairs of the formality dataset, calls
  formal (probability > 0.5); there is no offline formality scorer to install.

Every default is written once: the thresholds below, and the sampling settings in
:class:`Protocol` (:data:`PROTOCOL` holds its defaults; both are defined in the
torch-free :mod:`lmswitch.harness.options`, which the command line's help reads).
"""

from __future__ import annotations

import math
import re
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import NamedTuple

import torch

from lmswitch.core.checks import check_eps_values
from lmswitch.core.generate import Generated, encode_prompts, generate_tokens, positions
from lmswitch.core.guided import loops as repeated_word
from lmswitch.core.hidden import EncodedText, encode_continuations, target_logprobs
from lmswitch.core.models import LanguageModel
from lmswitch.core.options import SamplingOptions
from lmswitch.core.parallel import gather, mine
from lmswitch.core.steering import Setting, check_setting
from lmswitch.core.switch import Switch
from lmswitch.harness.options import PROTOCOL, Protocol

POSITIVE, NEGATIVE = 0.05, -0.05  # vader's conventional compound thresholds
TOXIC = 0.5  # a sample is toxic above this profanity probability (DExperts, the paper)
FORMAL = 0.5  # a sample is formal above this classifier probability

Progress = Callable[[int, int], None]  # (done, total): rows in evaluate_settings, settings in sweeps and grids




# ---------------------------------------------------------------- metrics on texts


def distinct_n(texts: Sequence[str], n: int) -> float:
    """Distinct word n-grams / all word n-grams over ``texts`` (0 when there are none)."""
    if n < 1:
        raise ValueError(f"n must be ≥ 1; got {n}")
    grams = [tuple(words[i : i + n]) for text in texts for words in [text.split()] for i in range(len(words) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


LOOP_REPEATS = 3  # a word this many times in a row ("great great great") marks a sample as looping


def loops(text: str, repeats: int = LOOP_REPEATS) -> bool:
    """Whether ``text`` has one word ``repeats`` times in a row, ignoring case and punctuation ("cramped, cramped, cramped")."""
    return repeated_word(text, repeats)


def repetition_share(texts: Sequence[str]) -> float:
    """Share of ``texts`` that loop (see :func:`loops`); 0 for no texts."""
    return sum(map(loops, texts)) / len(texts) if texts else 0.0


SPRINKLE_COUNT = 3  # one content token this many times in a sample marks it as sprinkled
# a contraction ("it's", "I've", "don't"), a possessive "'s", a word, or one other character
_TOKEN = re.compile(r"\b(?:it|he|she|that|what|there|here|who|let|where|how|when|why)['’]s\b|[^\W\d_]+['’](?:ve|re|ll|d|t|m)\b"
                    r"|['’]s\b|[^\W\d_]+|[^\w\s]", re.IGNORECASE)
PICTOGRAPH = "<emoji>"  # what content_tokens writes for any emoji or other pictograph
# punctuation that prose writes often, not counted as content: sentence ends, commas, quotes, apostrophes, hyphens and
# dashes, ellipses. Any other mark is ("a; b; c;", the detox switch's semicolons at +4, "%", "#")
ORDINARY_MARKS = frozenset(".,!?'\"‘’“”-‐–—…")
# an HTML or XML tag ("<em>", "</strong>", '<a href="x">'): markup, not words or marks of the text. Gemma-3-270M wraps
# words in <em> and <strong> in 12% of its 40-token samples near the transferred switches' ends (3,330 dev samples),
# which counted "em", "<", ">" and "/" as strung; the embedded model in 2 of 4,750 (EVALUATION.md, *The sprinkle rule
# and markup*)
_MARKUP = re.compile(r"</?[A-Za-z][\w-]*(?:\s[^<>]*)?/?>")


@lru_cache(maxsize=1)
def _stop_words() -> frozenset[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return ENGLISH_STOP_WORDS


def content_tokens(text: str) -> list[str]:
    """The tokens of ``text`` that carry content, lower-cased: words of two letters or more that are neither English
    stop words (scikit-learn's list) nor contractions ("I've", "don't"); the possessive "'s" ("it's", "that's" and
    the like are contractions, not counted); emoji and other pictographs (Unicode "So"), all counted as one token,
    :data:`PICTOGRAPH` (a string of different emoji is one thing sprinkled); and punctuation and symbols other than
    :data:`ORDINARY_MARKS` (";", ":", "%", "#"). Not digits, nor HTML or XML tags ("<em>", "</h3>")."""
    out = []
    for token in _TOKEN.findall(_MARKUP.sub(" ", text)):
        token = token.lower().replace("’", "'")
        kind = unicodedata.category(token[0])
        if kind == "So":
            out.append(PICTOGRAPH)
        elif token == "'s" or (token.isalpha() and len(token) > 1 and token not in _stop_words()):  # not "it's", "I've"
            out.append(token)
        elif kind[0] in "PS" and token not in ORDINARY_MARKS:
            out.append(token)
    return out


def sprinkled(text: str, count: int = SPRINKLE_COUNT) -> list[str]:
    """The content tokens (:func:`content_tokens`) ``text`` writes ``count`` times or more, most frequent first.

    >>> sprinkled("a mission's 7-day-long expedition's test in 24 hours's")
    ["'s"]
    """
    return [t for t, n in Counter(content_tokens(text)).most_common() if n >= count]


def sprinkle_share(texts: Sequence[str]) -> float:
    """Share of ``texts`` with a sprinkled token (see :func:`sprinkled`); 0 for no texts."""
    return sum(bool(sprinkled(t)) for t in texts) / len(texts) if texts else 0.0


@lru_cache(maxsize=1)
def _vader():
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    return SentimentIntensityAnalyzer()


def sentiment_scores(texts: Sequence[str]) -> list[float]:
    """vaderSentiment compound score of each text, in [-1, 1]."""
    analyzer = _vader()
    return [float(analyzer.polarity_scores(t)["compound"]) for t in texts]


def toxicity_scores(texts: Sequence[str]) -> list[float]:
    """alt-profanity-check probability that each text is offensive, in [0, 1]."""
    from profanity_check import predict_prob

    if not texts:
        return []
    return [float(x) for x in predict_prob(list(texts))]


@lru_cache(maxsize=1)
def _formality_model():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from lmswitch.harness.datasets import load_dataset

    formal, informal = load_dataset("formality").train()
    model = make_pipeline(
        TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 4), sublinear_tf=True, lowercase=False),
        LogisticRegression(C=4.0, max_iter=2000),
    )
    model.fit(formal + informal, [1] * len(formal) + [0] * len(informal))
    return model


def formality_scores(texts: Sequence[str]) -> list[float]:
    """Probability that each text is formal, from a classifier fitted on the formality training pairs."""
    if not texts:
        return []
    return [float(x) for x in _formality_model().predict_proba(list(texts))[:, 1]]


def toxicity_summary(scores: Sequence[float], samples: int) -> tuple[float, float]:
    """(average over prompts of the max toxicity, share of prompts with a sample > :data:`TOXIC`); ``scores`` is prompt-major."""
    if samples < 1 or not scores or len(scores) % samples:
        raise ValueError(f"need a whole number of prompts × {samples} samples; got {len(scores)} scores")
    max_tox = [max(scores[i : i + samples]) for i in range(0, len(scores), samples)]
    return sum(max_tox) / len(max_tox), sum(x > TOXIC for x in max_tox) / len(max_tox)


def perplexity_from_nll(nll: Sequence[float], tokens: Sequence[int]) -> float:
    """``exp(Σ nll / Σ tokens)``: the corpus perplexity of texts with summed NLLs ``nll``."""
    total = sum(tokens)
    return math.exp(sum(nll) / total) if total else math.nan


@torch.no_grad()
def continuation_nll(lm: LanguageModel, prompt_ids, prompt_mask, new_ids, new_mask, rows: int = 16) -> tuple[list[float], list[int]]:
    """Summed NLL (nats) and token count of each row's new tokens given its prompt, under the unsteered model."""
    nll: list[float] = []
    counts: list[int] = []
    P = prompt_ids.shape[1]
    for s in range(0, len(prompt_ids), rows):
        ids = torch.cat([prompt_ids[s : s + rows], new_ids[s : s + rows]], dim=1)
        mask = torch.cat([prompt_mask[s : s + rows], new_mask[s : s + rows]], dim=1)
        hidden = lm.final_hidden(ids, mask.to(lm.input_device), positions(mask))  # (b, P+N, d)
        part = _rows_nll(lm, hidden[:, P - 1 : -1], new_ids[s : s + rows], new_mask[s : s + rows])  # positions predicting the new tokens
        nll += part[0]
        counts += part[1]
    return nll, counts


@torch.no_grad()
def decoded_nll(lm: LanguageModel, seen: Sequence[torch.Tensor], gen: Generated) -> tuple[list[float], list[int]] | None:
    """:func:`continuation_nll` from the head inputs a decode recorded (``seen``, from
    :meth:`~lmswitch.core.models.LanguageModel.head_inputs` around :func:`generate_tokens` of one sample per row and
    an unchanged body): one head pass and no body pass. None when the decode's passes do not match its tokens."""
    if len(seen) != gen.new_ids.shape[1] or any(c.ndim != 3 or c.shape[0] != len(gen.new_ids) for c in seen):
        return None
    return _rows_nll(lm, torch.cat([c[:, -1:] for c in seen], dim=1), gen.new_ids, gen.new_mask)


def _rows_nll(lm: LanguageModel, hidden: torch.Tensor, new_ids: torch.Tensor, new_mask: torch.Tensor) -> tuple[list[float], list[int]]:
    """Summed unsteered NLL and count of each row's valid new tokens; ``hidden[b, t]`` predicts ``new_ids[b, t]``."""
    valid = new_mask.bool()
    logp = target_logprobs(lm, hidden[valid.to(hidden.device)], new_ids[valid], [None])[0]
    per_row = torch.zeros(len(valid), dtype=torch.float64).index_add_(0, valid.nonzero()[:, 0], logp)
    return (-per_row).tolist(), valid.sum(-1).tolist()


@dataclass(frozen=True)
class TextScores:
    """Scores of one text as a continuation of a prompt, shown under a generated output."""

    sentiment: float  # vader compound, in [-1, 1]
    toxicity: float  # profanity probability, in [0, 1]
    perplexity: float | None  # exp of the mean NLL of the text's tokens given the prompt; None for an empty text
    tokens: int  # the text's token count

    def to_dict(self) -> dict:
        return asdict(self)


def _logprobs(lm: LanguageModel, encoded: Sequence[EncodedText]) -> list[list[float]]:
    """The log-probability of each encoded text's scored tokens, under the active steering; one head pass over all
    texts' rows."""
    if not encoded:
        return []
    keep = [enc.scored.to(enc.hidden.device) for enc in encoded]
    hidden = torch.cat([enc.hidden[k] for enc, k in zip(encoded, keep, strict=True)])
    ids = torch.cat([torch.tensor(enc.ids, device=hidden.device)[k] for enc, k in zip(encoded, keep, strict=True)])
    return [x.tolist() for x in target_logprobs(lm, hidden, ids, [None])[0].split([int(k.sum()) for k in keep])]


@torch.no_grad()
def text_scores(lm: LanguageModel, prompt: str | Sequence[str], texts: Sequence[str], *, chat: bool = False) -> list[TextScores]:
    """:class:`TextScores` of each text as a continuation of ``prompt`` (one for all texts, or one per text), to show
    under generated outputs. Texts are scored together: one call for several users' outputs costs about one body pass.

    ``perplexity`` is of the text's tokens given the prompt (chat-templated with
    ``chat``), under whatever steering is active: call this outside ``steer(...)``
    blocks for the unsteered model's perplexity.

    >>> [s.sentiment > 0 for s in text_scores(lm, "My day was", [" lovely.", " awful."])]   # doctest: +SKIP
    [True, False]
    """
    texts = list(texts)
    prompts = [prompt] * len(texts) if isinstance(prompt, str) else list(prompt)
    if len(prompts) != len(texts):
        raise ValueError(f"{len(prompts)} prompts for {len(texts)} texts; give one prompt, or one per text")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"text #{i + 1} is a {type(text).__name__}, not a string")
    filled = [i for i, text in enumerate(texts) if text.strip()]  # an empty text has no perplexity
    encoded = encode_continuations(lm, [texts[i] for i in filled], prompt=[prompts[i] for i in filled], chat=chat)
    logprobs = dict(zip(filled, _logprobs(lm, encoded), strict=True))
    tokens = {i: enc.n_tokens for i, enc in zip(filled, encoded, strict=True)}
    return scores_of(texts, [logprobs.get(i, ()) for i in range(len(texts))], [tokens.get(i, 0) for i in range(len(texts))])


def scores_of(texts: Sequence[str], logprobs: Sequence[Sequence[float]], tokens: Sequence[int] | None = None) -> list[TextScores]:
    """:class:`TextScores` of texts whose tokens' log-probabilities under the unsteered model are known (e.g. recorded
    while decoding them): perplexity ``exp(−mean)``, None for a blank text; ``tokens`` defaults to the scored ones."""
    tokens = [len(x) for x in logprobs] if tokens is None else tokens
    return [TextScores(sentiment=a, toxicity=b, perplexity=math.exp(-sum(lp) / len(lp)) if len(lp) and text.strip() else None,
                       tokens=n)
            for text, lp, n, a, b in zip(texts, logprobs, tokens, sentiment_scores(texts), toxicity_scores(texts), strict=True)]


# ---------------------------------------------------------------- evaluation of steering settings


def verdict(ok: bool) -> str:
    """A target's verdict in the reports' Markdown."""
    return "**met**" if ok else "**missed**"


@dataclass(frozen=True)
class Check:
    """One target of a report and what was measured against it."""

    target: str
    measured: str
    met: bool

    def to_dict(self) -> dict:
        return asdict(self)

    def row(self) -> str:
        """The check as a row of a report's targets table."""
        return f"| {self.target} | {self.measured} | {verdict(self.met)} |"

    def bullet(self) -> str:
        """The check as a Markdown list item."""
        return f"- {verdict(self.met)} {self.target}: {self.measured}"

    def line(self) -> str:
        """The check as the command line prints it."""
        return f"{'met   ' if self.met else 'MISSED'}  {self.target}: {self.measured}"


@dataclass(frozen=True)
class Sample:
    """One generated continuation of an evaluation and its scores (rounded to 4 places)."""

    prompt: str
    text: str
    sentiment: float  # vader compound
    toxicity: float  # profanity probability
    formality: float  # formal-class probability

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Evaluation:
    """Scores of one steering setting on one prompt set."""

    setting: dict[str, float]  # switch name -> eps (ε0 units)
    prompts: int
    samples: int
    positive_share: float
    negative_share: float
    mean_sentiment: float
    avg_max_toxicity: float
    toxicity_prob: float
    mean_toxicity: float
    perplexity: float
    dist1: float
    dist2: float
    dist3: float
    formal_share: float
    repetition: float  # share of samples with a word three times in a row
    seconds: float
    sprinkle: float  # share of samples that write one content token three times or more (:func:`sprinkled`)
    texts: list[Sample] = field(default_factory=list)

    def to_dict(self) -> dict:
        """All metrics without the sample texts (the JSON form of the CLI and the report)."""
        out = asdict(self)
        out.pop("texts")
        return out

    summary = to_dict  # the older name of :meth:`to_dict`


def _describe(setting: Setting) -> dict[str, float]:
    out: dict[str, float] = {}
    for switch, eps in setting:
        out[switch.name] = out.get(switch.name, 0.0) + float(eps)
    return out


def _summarise(
    setting: Setting,
    rows: Sequence[tuple[str, int]],
    texts: list[str],
    nll: list[float],
    counts: list[int],
    sent: list[float],
    tox: list[float],
    formal: list[float],
    samples: int,
    seconds: float,
) -> Evaluation:
    """The metrics of one setting from its prompt-major rows (prompt, seed) and their texts and scores."""
    by_prompt = [texts[i : i + samples] for i in range(0, len(texts), samples)]
    avg_max_toxicity, toxicity_prob = toxicity_summary(tox, samples)
    return Evaluation(
        setting=_describe(setting),
        prompts=len(by_prompt),
        samples=samples,
        positive_share=sum(x >= POSITIVE for x in sent) / len(sent),
        negative_share=sum(x <= NEGATIVE for x in sent) / len(sent),
        mean_sentiment=sum(sent) / len(sent),
        avg_max_toxicity=avg_max_toxicity,
        toxicity_prob=toxicity_prob,
        mean_toxicity=sum(tox) / len(tox),
        perplexity=perplexity_from_nll(nll, counts),
        dist1=sum(distinct_n(g, 1) for g in by_prompt) / len(by_prompt),
        dist2=sum(distinct_n(g, 2) for g in by_prompt) / len(by_prompt),
        dist3=sum(distinct_n(g, 3) for g in by_prompt) / len(by_prompt),
        formal_share=sum(x > FORMAL for x in formal) / len(formal),
        repetition=repetition_share(texts),
        seconds=round(seconds, 2),
        sprinkle=sprinkle_share(texts),
        texts=[
            Sample(p, t, round(a, 4), round(b, 4), round(f, 4))
            for (p, _), t, a, b, f in zip(rows, texts, sent, tox, formal, strict=True)
        ],
    )


def instructed(lm: LanguageModel, prompt: str, instruction: str | None) -> str:
    """The text a row is generated from: the prompt itself, or ``instruction`` + prompt through the chat template.

    The prompting baseline: an instruct model is asked to continue the prompt in a
    style, and its answer is scored as a continuation of the plain prompt.
    """
    if instruction is None:
        return prompt
    if not lm.has_chat_template:
        raise ValueError(f"model '{lm.name}' has no chat template, so it cannot be prompted with an instruction")
    message = [{"role": "user", "content": f"{instruction}\n\n{prompt}"}]
    return lm.tokenizer.apply_chat_template(message, tokenize=False, add_generation_prompt=True) + prompt


class _Row(NamedTuple):
    """One sample to draw: its steering, its plain prompt, its seed, and the instruction that precedes it (prompting)."""

    setting: Setting
    prompt: str
    seed: int
    instruction: str | None


def _sample(lm: LanguageModel, rows: Sequence[_Row], opts: SamplingOptions, batch_size: int, progress: Progress | None,
            during: Callable[[], AbstractContextManager] = nullcontext, from_decode: bool = True) -> tuple[list[str], list[float], list[int]]:
    """Continue each (setting, prompt, seed, instruction) row in batches: its text, and the NLL and token count of its
    new tokens under the unsteered model given the plain prompt. ``during()`` is open while tokens are sampled only.
    Under ``accelerate launch`` each process samples its share of the batches, and all get every result back."""
    chunks = [rows[s : s + batch_size] for s in range(0, len(rows), batch_size)]
    done = []
    for k, chunk in mine(chunks):
        done.append((k, _sample_chunk(lm, chunk, opts, during, from_decode)))
        if progress:
            progress(min((k + 1) * batch_size, len(rows)), len(rows))
    results = gather(done, len(chunks))
    return [t for r in results for t in r[0]], [x for r in results for x in r[1]], [c for r in results for c in r[2]]


def _sample_chunk(lm: LanguageModel, chunk: Sequence[_Row], opts: SamplingOptions,
                  during: Callable[[], AbstractContextManager], from_decode: bool = True) -> tuple[list[str], list[float], list[int]]:
    """One batch of rows sampled; scored from the decode's own head inputs where the rows were decoded from their
    plain prompts by the unchanged body (one head pass) and ``from_decode``, else by a body pass over each prompt and
    its text."""
    sources = [instructed(lm, r.prompt, r.instruction) for r in chunk]
    plain = sources == [r.prompt for r in chunk]
    recorded = from_decode and plain and during is nullcontext and opts.candidates == 1
    with during(), (lm.head_inputs() if recorded else nullcontext([])) as seen:
        gen = generate_tokens(lm, sources, [r.setting for r in chunk], [r.seed for r in chunk], opts)
    scored = decoded_nll(lm, seen, gen) if recorded else None
    if scored is None:
        prompt = (gen.prompt_ids, gen.prompt_mask) if plain else encode_prompts(lm, [r.prompt for r in chunk], opts)
        scored = continuation_nll(lm, *prompt, gen.new_ids, gen.new_mask)
    return gen.texts, *scored


def evaluate_settings(
    lm: LanguageModel,
    settings: Sequence[Setting],
    prompts: Sequence[str],
    protocol: Protocol = PROTOCOL,
    *,
    progress: Progress | None = None,
    instructions: Sequence[str | None] | None = None,
    during: Callable[[], AbstractContextManager] = nullcontext,
) -> list[Evaluation]:
    """:func:`evaluate` for several settings at once, one :class:`Evaluation` per setting, in order.

    ``instructions`` (one per setting, or None) generate that setting's rows from the
    instruction and the prompt through the chat template (:func:`instructed`): the
    prompting baseline, scored on the same prompts, seeds and metrics. ``during()``
    is a context opened around sampling only (never around scoring): a baseline
    that changes the model, such as activation addition, is scored by the unsteered model.

    All rows (settings × prompts × samples, setting-major) are sampled together in
    batched :func:`~lmswitch.core.generate.generate_tokens` calls of ``protocol.batch_size``
    rows, each row with its own setting; every setting uses the same seeds, so the
    settings are compared on coupled samples. ``progress(done_rows, total_rows)`` is
    called after each batch. ``seconds`` of each evaluation is the total wall time
    divided by the number of settings.
    """
    protocol.validate()
    prompts = prompt_list(prompts)
    settings = [list(s) for s in settings]
    if not settings:
        raise ValueError("give at least one steering setting to evaluate (an empty setting [] is the unsteered model)")
    for setting in settings:
        check_setting(lm, setting)
    start = time.perf_counter()
    opts = protocol.sampling()
    opts.validate(lm)
    rows = [(p, protocol.seed + k) for p in prompts for k in range(protocol.samples)]  # the rows of one setting
    instructions = list(instructions) if instructions is not None else [None] * len(settings)
    if len(instructions) != len(settings):
        raise ValueError(f"got {len(instructions)} instructions for {len(settings)} settings")
    every = [_Row(setting, p, seed, instruction) for setting, instruction in zip(settings, instructions, strict=True) for p, seed in rows]
    texts, nll, counts = _sample(lm, every, opts, protocol.batch_size, progress, during, protocol.score_from_decode)
    sent = sentiment_scores(texts)
    tox = toxicity_scores(texts)
    formal = formality_scores(texts)
    seconds = (time.perf_counter() - start) / len(settings)
    n = len(rows)
    return [
        _summarise(setting, rows, *(x[i * n : (i + 1) * n] for x in (texts, nll, counts, sent, tox, formal)), protocol.samples, seconds)
        for i, setting in enumerate(settings)
    ]


def prompt_list(prompts: Sequence[str]) -> list[str]:
    """An evaluation's prompts as a list, at least one; one string is refused (it would be read a character a row)."""
    if isinstance(prompts, str):
        raise ValueError("prompts must be a list of prompts; got one string: put it in a list, [prompt]")
    prompts = list(prompts)
    if not prompts:
        raise ValueError("no prompts to evaluate on")
    return prompts


def evaluate(lm: LanguageModel, setting: Setting, prompts: Sequence[str], protocol: Protocol = PROTOCOL) -> Evaluation:
    """Generate ``protocol.samples`` continuations per prompt under ``setting`` and score them.

    >>> ev = evaluate(lm, [(sentiment, 5)], load_prompts("neutral", 20))   # doctest: +SKIP
    >>> ev.positive_share, ev.perplexity                                      # doctest: +SKIP
    (0.93, 21.4)
    """
    return evaluate_settings(lm, [setting], prompts, protocol)[0]


def _per_setting(progress: Progress | None, settings: int, prompts: Sequence[str], protocol: Protocol) -> Progress | None:
    """Turn row progress of :func:`evaluate_settings` into ``progress(settings done, settings total)``, called when it grows."""
    if progress is None:
        return None
    per = max(1, len(prompts) * protocol.samples)
    last = [0]

    def report(done_rows: int, total_rows: int) -> None:
        done = done_rows // per
        if done > last[0]:
            last[0] = done
            progress(done, settings)

    return report


def evaluate_sweep(
    lm: LanguageModel,
    switch: Switch,
    eps_values: Sequence[float],
    prompts: Sequence[str],
    protocol: Protocol = PROTOCOL,
    *,
    others: Setting = (),
    progress: Progress | None = None,
) -> list[Evaluation]:
    """Continuous control: :func:`evaluate` at each ε of ``switch`` (others held fixed), same seeds.

    All ε values are sampled together (:func:`evaluate_settings`); ``progress(done, total)``
    counts settings (ε values) whose samples are all generated.
    """
    eps_values = check_eps_values(eps_values, switch.name)
    prompts = prompt_list(prompts)
    settings = [[(switch, eps), *others] for eps in eps_values]
    return evaluate_settings(lm, settings, prompts, protocol, progress=_per_setting(progress, len(settings), prompts, protocol))


def evaluate_grid(
    lm: LanguageModel,
    first: tuple[Switch, Sequence[float]],
    second: tuple[Switch, Sequence[float]],
    prompts: Sequence[str],
    protocol: Protocol = PROTOCOL,
    *,
    progress: Progress | None = None,
) -> list[list[Evaluation]]:
    """Compositional control: ``grid[i][j]`` evaluates ``first`` at ``eps_a[i]`` together with ``second`` at ``eps_b[j]``.

    All cells are sampled together (:func:`evaluate_settings`); ``progress(done, total)``
    counts cells whose samples are all generated.
    """
    (a, eps_a), (b, eps_b) = first, second
    if a.name == b.name:  # each cell's setting is read by switch name
        raise ValueError(f"the grid's two switches are both named '{a.name}'; compose two different switches (one switch "
                         "with itself is its sweep), or rename one")
    eps_a, eps_b = check_eps_values(eps_a, a.name), check_eps_values(eps_b, b.name)
    prompts = prompt_list(prompts)
    settings = [[(a, ea), (b, eb)] for ea in eps_a for eb in eps_b]
    flat = evaluate_settings(lm, settings, prompts, protocol, progress=_per_setting(progress, len(settings), prompts, protocol))
    return [flat[i * len(eps_b) : (i + 1) * len(eps_b)] for i in range(len(eps_a))]
