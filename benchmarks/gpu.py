"""Device checks of lmswitch: steering, the request batcher, training, PEFT export, batch-invariant attention and the
lenses on one device (a CUDA GPU), in float32 and bfloat16, with a tiny random model (nothing is downloaded).

    python3 benchmarks/gpu.py --device cuda --out gpu.txt            # both dtypes
    python3 benchmarks/gpu.py --device cuda --dtype bfloat16
    PYTHONPATH=. .venv/bin/python benchmarks/gpu.py --device cpu     # the same checks on the CPU (~5 s)

The model is a seeded random ``LlamaForCausalLM`` (by default hidden 128 and 4 layers: ``--hidden``, ``--layers``;
4 query heads over 2 key-value heads) over the tests' 64-word vocabulary, saved to a temporary folder and loaded with
the library's own ``load_model(folder, device=..., dtype=...)``, as a GPU user loads a model. The vocabulary,
tokenizer, random switches and texts come from tests/tiny.py (the tests' own, which needs no pytest).

Checks, in each dtype:

1. ``zero-eps``: ``generate`` with a switch at ε 0 gives the unsteered texts (3 seeds), at ε ±8 others; a ``sweep``
   row at ε 0 equals the unsteered row of a batch of the same shape.
   ``sweep-eps0-alone``: that sweep row also equals the unsteered generation decoded alone (batch of 1).
2. ``batcher``: five requests (different prompts, switches, ε, seeds, lengths; an unsteered twin with the seed of a
   steered row) submitted while the compute thread is held share one batch, and each row's tokens equal the request's
   decoded alone by a fresh ``Batcher`` (and, in float32, by ``generate_tokens`` alone); ``Batcher.logprobs`` is
   finite, and the log-probabilities the unsteered rows recorded while decoding equal those of their head inputs (to
   rounding). ``batcher-scores``: ``Batcher.scores`` of the steered row and its twin (skipped without vaderSentiment
   and alt-profanity-check).
3. ``train``: ``train_switch`` on 30 + 30 texts on the device; W is float32 on the CPU, saves and loads
   (``Switch.save``/``load_switch``) unchanged, and at ε 1 raises held-out label-A texts' likelihood.
   ``train-adam``: the same with the paper's Adam steps (40), whose gradient is the library's own autograd function.
4. ``peft-export``: ``export_peft``'s adapter loaded by peft on the same base, on the device, gives the steered logits.
5. ``attention-kernel``: inside ``batch_invariant()`` a row's attention (in the dtype) has the same bits alone as left-padded beside
   other rows. ``attention-model``: the same for the whole model's logits of a left-padded prompt. That also needs
   the linear layers to be batch-invariant, which the library claims on the CPU only (it packs them there): off the
   CPU a difference within rounding is a SKIP, a larger one (a wrong mask or position) a FAIL.
6. ``lenses``: ``measure``, ``style_slope``, ``highlight`` and ``token_changes`` run and give finite numbers.

Each check prints one line (PASS/FAIL/SKIP, name, detail, seconds), a failure also the end of its traceback; then a
summary. ``--out FILE`` writes the same lines to FILE as they come. Exit status 1 when a check failed.
``--list-imports`` also prints the third-party packages the run imported.

Needs torch, transformers (and its tokenizers), safetensors, numpy, scipy and scikit-learn; peft for the export check
(skipped without it). Not gradio, pytest, vaderSentiment or alt-profanity-check.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import platform
import random
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from tiny import EOS_ID, PAD_ID, SPECIALS, VOCAB, WORDS_A, WORDS_B, make_tokenizer, random_switch, run_together, sample_texts  # noqa: E402

import lmswitch as ls  # noqa: E402
from lmswitch.core.attention import attention, batch_invariant, use_batch_invariant  # noqa: E402
from lmswitch.core.generate import generate_tokens  # noqa: E402
from lmswitch.core.models import LanguageModel  # noqa: E402
from lmswitch.core.options import SamplingOptions, TrainConfig  # noqa: E402
from lmswitch.core.packed import cpu_name  # noqa: E402
from lmswitch.lenses.meter import style_slope  # noqa: E402
from lmswitch.serve.batcher import Batcher, Row  # noqa: E402  (imports harness.evaluate, whose scorers load lazily)
from lmswitch.serve.compute import ComputeThread  # noqa: E402

# --- the tiny model (vocabulary, tokenizer, switches and texts from tests/tiny.py, which needs no pytest) -------------

HEADS, KV_HEADS, CONTEXT = 4, 2, 64
INIT = 0.3  # weight init scale: peaky next-token distributions, a head with reach for a trained switch (as test_train)
# differences that are rounding, not a wrong mask, position or row: of logits (relative to the largest) and of
# log-probabilities (a bfloat16 logit's rounding step is ~0.06 at 10, and two shapes of product may round it apart)
ROUNDING = {torch.float32: 1e-4, torch.bfloat16: 0.05}
LOGPROB_ROUNDING = {torch.float32: 1e-4, torch.bfloat16: 0.25}
SCALE = 20.0  # random switches' scale: strong enough to change the tiny model's tokens

PROMPT = "the kind and"
MAX_NEW = 12
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def save_tiny_llama(folder: Path, hidden: int, layers: int, seed: int = 0) -> Path:
    """A seeded random Llama (float32) and its tokenizer, saved as a Hugging Face model folder."""
    config = LlamaConfig(vocab_size=len(VOCAB), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=CONTEXT,
                         bos_token_id=EOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID, initializer_range=INIT)
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    make_tokenizer().save_pretrained(folder)
    return folder


# --- the harness -----------------------------------------------------------------------------------------------------


class Skip(Exception):
    """The check cannot run here; its message says why."""


def ensure(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


@dataclass
class Setup:
    lm: LanguageModel
    folder: Path  # the model's files (the PEFT check loads its base from them)
    tmp: Path
    dtype: torch.dtype

    @property
    def float32(self) -> bool:
        return self.dtype == torch.float32


class Report:
    """Prints each result line and appends it to ``out``; counts the outcomes."""

    def __init__(self, out: Path | None) -> None:
        self.out = out.open("w", encoding="utf-8") if out else None
        self.counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}

    def close(self) -> None:
        if self.out:
            self.out.close()

    def line(self, text: str) -> None:
        print(text, flush=True)
        if self.out:
            self.out.write(text + "\n")
            self.out.flush()

    def run(self, name: str, check: Callable[[Setup], str], setup: Setup) -> None:
        start = time.perf_counter()
        extra = []
        try:
            status, detail = "PASS", check(setup)
        except Skip as why:
            status, detail = "SKIP", str(why)
        except Exception as err:  # every failure is reported, and the next check runs
            status, detail = "FAIL", f"{type(err).__name__}: {err}"[:400]
            extra = ["      " + x for x in "".join(traceback.format_tb(err.__traceback__)[-4:]).rstrip().splitlines()]
        self.counts[status] += 1
        self.line(f"{status} {name:<34} {detail} ({time.perf_counter() - start:.1f} s)")
        for x in extra:
            self.line(x)


# --- 1. steering at ε 0 is the unsteered model -----------------------------------------------------------------------


def check_zero_eps(s: Setup) -> str:
    lm = s.lm
    a = random_switch(lm, seed=1, scale=SCALE, name="a")
    kw = dict(max_new_tokens=MAX_NEW, seed=0, samples=3)
    plain = ls.generate(lm, PROMPT, [], **kw)
    ensure(ls.generate(lm, PROMPT, [(a, 0.0)], **kw) == plain, "generate at ε 0 differs from the unsteered texts")
    changed = sum(x != y for e in (8.0, -8.0) for x, y in zip(ls.generate(lm, PROMPT, [(a, e)], **kw), plain, strict=True))
    ensure(changed >= 4, f"ε ±8 changed only {changed} of 6 texts")
    swept = ls.sweep(lm, PROMPT, a, [0.0, 8.0, -8.0], seed=0, max_new_tokens=MAX_NEW)
    batch = ls.generate(lm, [PROMPT] * 3, [], seed=0, max_new_tokens=MAX_NEW)  # the unsteered batch of the same shape
    ensure(swept[0][1] == batch[0], "the sweep's ε 0 row differs from the unsteered row of its batch shape")
    ensure(swept[1][1] != swept[0][1] or swept[2][1] != swept[0][1], "the sweep's ε ±8 rows equal its ε 0 row")
    return f"3 seeds equal at ε 0, ε ±8 changed {changed}/6; sweep ε 0 row = unsteered batch row"


def check_sweep_alone(s: Setup) -> str:
    lm = s.lm
    a = random_switch(lm, seed=1, scale=SCALE, name="a")
    for seed in range(3):
        swept = ls.sweep(lm, PROMPT, a, [0.0, 8.0, -8.0], seed=seed, max_new_tokens=MAX_NEW)
        alone = ls.generate(lm, PROMPT, [], seed=seed, max_new_tokens=MAX_NEW)[0]
        ensure(swept[0][1] == alone, f"seed {seed}: sweep ε 0 row {swept[0][1]!r} != alone {alone!r}")
    return "3 seeds: a sweep's ε 0 row (batch of 3) = the unsteered generation alone"


# --- 2. the request batcher ------------------------------------------------------------------------------------------


def batcher_requests(lm: LanguageModel) -> list[tuple]:
    a, b = random_switch(lm, seed=1, scale=SCALE, name="a"), random_switch(lm, seed=2, scale=SCALE, name="b")
    return [
        ("the kind and", [(a, 4.0)], 1, 8),
        ("she was", [], 2, 5),
        ("we love the bright warm day and it was", [(b, -3.0), (a, 1.0)], 3, 10),
        ("the kind and", [], 1, 8),  # the unsteered twin of the first request: same prompt, same seed
        ("cold", [(a, 6.0)], 4, 1),
    ]


_BATCHED: dict[int, tuple[Batcher, list[Row]]] = {}  # id(lm) -> the batcher check's batcher and rows, for its scores check


def check_batcher(s: Setup) -> str:
    lm, requests = s.lm, batcher_requests(s.lm)
    batcher = Batcher(lm, ComputeThread())
    ensure(batcher.rolling is not None, "the llama cache should be mergeable (rows join a running decode)")
    rows = run_together(batcher, requests)
    ensure(batcher.batches == 1 and batcher.rows == len(requests), f"{batcher.batches} batches of {batcher.rows} rows, not 1 of 5")
    for k, (row, (prompt, setting, seed, n)) in enumerate(zip(rows, requests, strict=True)):
        alone = Batcher(lm, ComputeThread()).generate(prompt, setting, seed=seed, options=SamplingOptions(max_new_tokens=n))
        ensure(row.new_ids == alone.new_ids, f"request {k}: batched {row.new_ids} != alone {alone.new_ids}")
        if s.float32:
            solo = generate_tokens(lm, [prompt], [setting], [seed], SamplingOptions(max_new_tokens=n))
            ensure(row.new_ids == solo.new_ids[0][: int(solo.new_mask[0].sum())].tolist(), f"request {k}: batched != generate_tokens")
    ensure(rows[0].new_ids != rows[3].new_ids, "the steered row equals its unsteered twin")
    logprobs = batcher.logprobs(rows)
    ensure([len(x) for x in logprobs] == [len(r.text_ids) for r in rows], "logprobs: one per token of each text")
    ensure(all(math.isfinite(v) and v <= 0 for x in logprobs for v in x), "logprobs: not finite log-probabilities")
    twins = [k for k, row in enumerate(rows) if row.logprobs is not None]  # unsteered rows score their tokens as they draw them
    ensure(twins == [1, 3], f"rows {twins} recorded their log-probabilities, not the unsteered rows 1 and 3")
    recomputed = batcher.logprobs([replace(rows[k], logprobs=None) for k in twins])  # from the head inputs instead
    gap = max((abs(x - y) for k, again in zip(twins, recomputed, strict=True) for x, y in zip(rows[k].logprobs, again, strict=True)), default=0.0)
    ensure(gap <= LOGPROB_ROUNDING[s.dtype], f"an unsteered row's recorded log-probabilities differ from its head inputs' by {gap:.2e}")
    _BATCHED[id(lm)] = (batcher, rows)
    also = ", = generate_tokens alone" if s.float32 else ""
    return (f"1 batch of 5 rows, each = fresh Batcher alone{also}; logprobs finite ({sum(map(len, logprobs))} tokens), the "
            f"twins' recorded ones = their head inputs' (max |Δ| {gap:.1e})")


def check_batcher_scores(s: Setup) -> str:
    missing = [m for m in ("vaderSentiment", "profanity_check") if importlib.util.find_spec(m) is None]
    if missing:
        raise Skip(f"Batcher.scores needs {' and '.join(missing)} (its sentiment and toxicity scorers), not installed")
    if id(s.lm) not in _BATCHED:
        raise Skip("the batcher check did not finish")
    batcher, rows = _BATCHED[id(s.lm)]
    prompt = batcher_requests(s.lm)[0][0]
    scores = batcher.scores(prompt, [rows[0], rows[3]], chat=False)  # a steered row and its twin, as a comparison shows them
    ensure(len(scores) == 2, "one score per row")
    numbers = [x for sc in scores for x in (sc.sentiment, sc.toxicity, sc.perplexity) if x is not None]
    ensure(all(math.isfinite(x) for x in numbers), f"non-finite scores {scores}")
    return f"{len(numbers)} finite numbers, perplexities {[round(sc.perplexity or 0, 2) for sc in scores]}"


# --- 3. training ------------------------------------------------------------------------------------------------------


@torch.no_grad()
def mean_loglik(lm: LanguageModel, texts: list[str], setting) -> float:
    """Mean per-token log-likelihood of equal-length texts through the whole model under ``setting``."""
    ids = torch.tensor([lm.tokenizer(t, add_special_tokens=False).input_ids for t in texts]).to(lm.input_device)
    with ls.steer(lm, setting):
        logits = lm.model(input_ids=ids).logits.float()
    return torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).mean().item()


def check_train(s: Setup) -> str:
    lm, rng = s.lm, random.Random(0)
    pos, neg = sample_texts(rng, WORDS_A, 30), sample_texts(rng, WORDS_B, 30)
    switch = ls.train_switch(lm, pos, neg, config=TrainConfig(seed=0), name="style", positive_label="A", negative_label="B")
    ensure(switch.W.device.type == "cpu" and switch.W.dtype == torch.float32, f"W is {switch.W.dtype} on {switch.W.device}")
    ensure(bool(torch.isfinite(switch.W).all()) and float(switch.W.norm()) > 0, "W is not finite, or zero")
    path = switch.save(s.tmp / f"style-{s.dtype}.safetensors".replace("torch.", ""))
    loaded = ls.load_switch(path, lm)
    ensure(torch.equal(loaded.W, switch.W) and loaded.name == "style", "the loaded switch differs from the saved one")
    held_a, held_b = sample_texts(random.Random(1001), WORDS_A, 20), sample_texts(random.Random(1002), WORDS_B, 20)
    a = {e: mean_loglik(lm, held_a, [(loaded, e)]) for e in (0.0, 1.0)}
    b = {e: mean_loglik(lm, held_b, [(loaded, e)]) for e in (0.0, 1.0)}
    ensure(a[1.0] > a[0.0] + 1e-3, f"ε 1 does not raise label-A likelihood: {a[0.0]:.4f} -> {a[1.0]:.4f}")
    return (f"{switch.card.get('optimizer')}; saved+loaded; held-out A log-lik {a[0.0]:.3f} -> {a[1.0]:.3f} at ε 1 "
            f"(B {b[0.0]:.3f} -> {b[1.0]:.3f})")


def check_train_adam(s: Setup) -> str:
    lm, rng = s.lm, random.Random(0)
    pos, neg = sample_texts(rng, WORDS_A, 30), sample_texts(rng, WORDS_B, 30)
    switch = ls.train_switch(lm, pos, neg, config=TrainConfig(optimizer="adam", steps=40, seed=0), name="style-adam")
    ensure(switch.card["optimizer"] == "adam", f"trained with {switch.card['optimizer']}, not adam")
    ensure(switch.W.device.type == "cpu" and bool(torch.isfinite(switch.W).all()) and float(switch.W.norm()) > 0, "W: not finite, or zero")
    held_a = sample_texts(random.Random(1001), WORDS_A, 20)
    a = {e: mean_loglik(lm, held_a, [(switch, e)]) for e in (0.0, 1.0)}
    ensure(a[1.0] > a[0.0] + 1e-3, f"ε 1 does not raise label-A likelihood: {a[0.0]:.4f} -> {a[1.0]:.4f}")
    return f"{switch.card.get('steps', '?')} Adam steps; held-out A log-lik {a[0.0]:.3f} -> {a[1.0]:.3f} at ε 1"


# --- 4. PEFT export ---------------------------------------------------------------------------------------------------


def check_peft(s: Setup) -> str:
    if importlib.util.find_spec("peft") is None:
        raise Skip("peft is not installed")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from lmswitch.core.export import export_peft

    lm = s.lm
    a = random_switch(lm, seed=1, scale=SCALE, name="mood")
    report = export_peft(lm, [(a, 6.0)], s.tmp / f"adapter-{str(s.dtype).removeprefix('torch.')}")
    ensure(report.relative_logit_error < 1e-4, f"report: relative logit error {report.relative_logit_error:.2e}")
    base = AutoModelForCausalLM.from_pretrained(s.folder, dtype=s.dtype).to(lm.input_device)
    adapted = PeftModel.from_pretrained(base, report.out).eval()
    ids = torch.randint(len(SPECIALS), lm.vocab_size, (2, 10), generator=torch.Generator().manual_seed(3)).to(lm.input_device)
    with torch.no_grad():
        got = adapted(input_ids=ids).logits.float()
        with adapted.disable_adapter():
            plain = adapted(input_ids=ids).logits.float()
        with ls.steer(lm, [(a, 6.0)]):
            want = lm.model(input_ids=ids).logits.float()
    change = float((want - plain).norm())
    error = float((got - want).norm()) / change
    largest = float((got - want).abs().max())
    ensure(change > 1e-2 * float(plain.norm()), "the steering hardly changes the logits")
    # compared with the steering's change itself: peft's plain model and the library's do not share kernels (on the CPU
    # the library packs its linear layers: at hidden 576 their unsteered float32 logits differ by ~5e-4), and bfloat16
    # rounds c + Mc (the library) and E c (peft) differently
    ensure(error < (1e-4 if s.float32 else 0.05), f"the adapter's logits are {error:.1e} of the steering's change away "
                                                  f"from the steered model's (max |Δ| {largest:.2e})")
    return f"rank {report.rank}; peft logits vs steered: max |Δ| {largest:.2e}, {error:.1e} of the steering's change"


# --- 5. batch-invariant attention -------------------------------------------------------------------------------------


def attention_heads(batch: int, length: int, dtype: torch.dtype, device: torch.device, seed: int):
    """One query token per row (9 heads) and ``length`` keys and values (3 key heads), as tests/test_attention.py."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, h, n, 64, generator=g).to(device, dtype) for h, n in ((9, 1), (3, length), (3, length)))


def invariant_step(q, k, v, mask=None) -> torch.Tensor:
    with batch_invariant():
        return attention(None, q, k, v, mask, scaling=0.125)[0]


def left_padded(q, k, v, pads: int, others: int, seed: int):
    """The same rows padded on the left by ``pads`` masked keys, beside ``others`` unrelated rows."""
    q2, k2, v2 = attention_heads(others, k.shape[2] + pads, q.dtype, q.device, seed)
    g = torch.Generator().manual_seed(100 + seed)
    junk = [torch.randn(x.shape[0], 3, pads, 64, generator=g).to(x.device, x.dtype) for x in (k, v)]
    k, v = torch.cat([junk[0], k], 2), torch.cat([junk[1], v], 2)
    mask = torch.ones(q.shape[0] + others, 1, 1, k.shape[2], dtype=torch.bool, device=q.device)
    mask[: q.shape[0], ..., :pads] = False
    return torch.cat([q, q2]), torch.cat([k, k2]), torch.cat([v, v2]), mask


def check_attention_kernel(s: Setup) -> str:
    q, k, v = attention_heads(2, 37, s.dtype, s.lm.input_device, seed=0)
    alone = invariant_step(q, k, v)
    for pads, others in ((1, 0), (3, 2), (8, 6), (40, 1)):
        together = invariant_step(*left_padded(q, k, v, pads, others, seed=pads))
        diff = float((together[:2].float() - alone.float()).abs().max())
        ensure(torch.equal(together[:2], alone), f"{pads} pads beside {others} rows: differs by up to {diff:.2e}")
    return "2 rows' attention alone = left-padded by 1/3/8/40 beside 0-6 other rows, bit for bit"


def check_attention_model(s: Setup) -> str:
    lm = s.lm
    ensure(use_batch_invariant(lm.model), f"attention is {lm.model.config._attn_implementation}, not routed to lmswitch's")
    g = torch.Generator().manual_seed(1)
    prompt, other = (torch.randint(len(SPECIALS), lm.vocab_size, (1, n), generator=g) for n in (5, 12))
    batch = torch.cat([torch.cat([torch.full((1, 7), PAD_ID), prompt], 1), other])
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[0, :7] = 0
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    device = lm.input_device
    with torch.inference_mode(), batch_invariant():
        alone = lm.model(input_ids=prompt.to(device)).logits[0]
        together = lm.model(input_ids=batch.to(device), attention_mask=mask.to(device), position_ids=positions.to(device)).logits[0, 7:]
    diff = float((together.float() - alone.float()).abs().max())
    if device.type != "cpu" and not torch.equal(together, alone):  # the library packs (and so claims this of) CPU layers only
        ensure(diff <= ROUNDING[s.dtype] * float(alone.float().abs().max()),
               f"the padded prompt's logits differ from alone by {diff:.2e}, more than rounding")
        raise Skip(f"not claimed on {device.type}: its linear layers are not batch-invariant there (logits differ from "
                   f"alone by up to {diff:.2e}, rounding); the batcher check compares the tokens a user gets")
    ensure(torch.equal(together, alone), f"the padded prompt's logits differ from alone by up to {diff:.2e}")
    return "a 5-token prompt's logits left-padded by 7 beside a 12-token row = alone, bit for bit"


# --- 6. lenses --------------------------------------------------------------------------------------------------------


def finite(values) -> bool:
    return all(math.isfinite(float(x)) for x in values)


def check_lenses(s: Setup) -> str:
    lm = s.lm
    a = random_switch(lm, seed=1, scale=SCALE, name="a", positive_label="A", negative_label="B")
    text = "we love the warm and bright day but the cold was awful and she had a sad frown"
    m = ls.measure(lm, [a], text)
    row = m.switches[0]
    ensure(finite([m.base_loglik, m.best_loglik, m.gain, row.best_eps, *row.loglik]), f"measure: not finite ({m})")
    slope = style_slope(lm, a, text)
    h = ls.highlight(lm, a, text, eps=5.0)
    ensure(finite([slope, h.total_delta, *(t.delta for t in h.tokens)]), "style_slope/highlight: not finite")
    if not h.spans:  # only spans that read toward the side are shown: a random switch's text may read the other way
        h = ls.highlight(lm, a, text, eps=-5.0)
    ensure(h.spans and all(span.score > 0 for span in h.spans), f"highlight: no span toward either side, or one against "
                                                                f"its side ({h.spans})")
    changes = ls.token_changes(lm, [(a, 5.0)], text, prompt="the")
    ensure(len(changes) == len(text.split()), "token_changes: one row per token")
    ensure(finite(x for c in changes if c.scored for x in (c.logp_base, c.logp_steered, c.delta)), "token_changes: not finite")
    return f"measure best ε {row.best_eps:+.2f} (gain {m.gain:.3f}), slope {slope:+.3f}, span {h.spans[0].text!r}"


CHECKS: list[tuple[str, Callable[[Setup], str]]] = [
    ("zero-eps", check_zero_eps),
    ("sweep-eps0-alone", check_sweep_alone),
    ("batcher", check_batcher),
    ("batcher-scores", check_batcher_scores),
    ("train", check_train),
    ("train-adam", check_train_adam),
    ("peft-export", check_peft),
    ("attention-kernel", check_attention_kernel),
    ("attention-model", check_attention_model),
    ("lenses", check_lenses),
]


# --- main -------------------------------------------------------------------------------------------------------------


def third_party_modules() -> list[str]:
    """Top-level packages in sys.modules from outside the standard library (and not lmswitch)."""
    names = {name.partition(".")[0] for name in list(sys.modules)}
    return sorted(n for n in names if n not in sys.stdlib_module_names and not n.startswith("_") and n != "lmswitch")


def describe(device: torch.device) -> str:
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name() or platform.machine()
    return (f"lmswitch {ls.__version__}, torch {torch.__version__}, transformers {transformers.__version__}, "
            f"python {platform.python_version()}; device {device} ({where})")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="torch device to check (default: cuda)")
    parser.add_argument("--dtype", choices=[*DTYPES, "both"], default="both", help="model dtype (default: both)")
    parser.add_argument("--hidden", type=int, default=128, help="the model's hidden size, a multiple of 8 (default: 128)")
    parser.add_argument("--layers", type=int, default=4, help="its decoder layers (default: 4)")
    parser.add_argument("--out", type=Path, help="also write the result lines to this file")
    parser.add_argument("--list-imports", action="store_true", help="print the third-party packages imported, at the end")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"--device {args.device}: CUDA is not available to torch {torch.__version__}", file=sys.stderr)
        return 2
    if device.type == "cpu":
        torch.set_num_threads(1)  # the tiny model is fastest on one thread (tests/conftest.py)
    transformers.logging.disable_progress_bar()  # (saving and loading the tiny model)
    report = Report(args.out)
    report.line(describe(device))
    dtypes = list(DTYPES) if args.dtype == "both" else [args.dtype]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lmswitch-gpu-") as tmp:
        folder = save_tiny_llama(Path(tmp) / "tiny-llama", args.hidden, args.layers)
        for name in dtypes:
            lm = ls.load_model(folder, device=device, dtype=name)
            report.line(f"--- {name}: {lm.name}, {type(lm.model).__name__} on {lm.input_device} in {lm.model.dtype}, "
                        f"hidden {lm.hidden_size}, {len(lm.decoder_layers())} layers, attention {lm.model.config._attn_implementation}")
            setup = Setup(lm, folder, Path(tmp), DTYPES[name])
            for check_name, check in CHECKS:
                report.run(f"[{name}] {check_name}", check, setup)
    c = report.counts
    report.line(f"summary: {c['PASS']} passed, {c['FAIL']} failed, {c['SKIP']} skipped in {time.perf_counter() - start:.0f} s on {device}")
    if args.list_imports:
        report.line("third-party packages imported: " + " ".join(third_party_modules()))
    report.close()
    return 1 if c["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
