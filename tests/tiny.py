"""The tests' tiny vocabulary, word-level tokenizer, random switches, style texts and batcher helpers, without pytest: ``conftest.py``
builds its models from them, and ``benchmarks/gpu.py`` runs its checks with them on machines that have no pytest."""

from __future__ import annotations

import random
import threading

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from lmswitch.core.models import LanguageModel
from lmswitch.core.options import SamplingOptions
from lmswitch.core.switch import Switch
from lmswitch.serve.batcher import Batcher, Row
from lmswitch.serve.compute import ComputeThread

SPECIALS = ["[UNK]", "[PAD]", "[EOS]"]
UNK_ID, PAD_ID, EOS_ID = 0, 1, 2

# two "styles" and a shared filler vocabulary; 3 + 10 + 10 + 41 = 64 tokens
WORDS_A = ["happy", "joy", "love", "great", "good", "bright", "warm", "kind", "sweet", "smile"]
WORDS_B = ["sad", "grief", "hate", "awful", "bad", "dark", "cold", "cruel", "bitter", "frown"]
FILLER = (
    "the a and of to in is was it that he she they we you i on with for at by this from not but "
    "or as be are have had one all there when so what an which my me"
).split()
WORDS = WORDS_A + WORDS_B + FILLER
VOCAB = SPECIALS + WORDS
VOCAB_SIZE = len(VOCAB)

assert VOCAB_SIZE == 64 and len(set(VOCAB)) == VOCAB_SIZE


def make_tokenizer() -> PreTrainedTokenizerFast:
    """A WordLevel tokenizer over VOCAB, split on whitespace, with [UNK]/[PAD]/[EOS]."""
    backend = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(VOCAB)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")
    assert tok.unk_token_id == UNK_ID and tok.pad_token_id == PAD_ID and tok.eos_token_id == EOS_ID
    return tok


def random_switch(lm: LanguageModel, *, seed: int, scale: float = 1.0, **kwargs) -> Switch:
    """A random switch made for ``lm`` (right size and fingerprint)."""
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(lm.hidden_size, lm.hidden_size, generator=g) * scale
    kwargs.setdefault("name", f"random{seed}")
    return Switch(W=W, model_name=lm.name, model_fingerprint=lm.fingerprint, **kwargs)


def judged_switch(lm: LanguageModel, *, seed: int, scale: float, judge_seed: int | None = None, **kwargs) -> Switch:
    """:func:`random_switch` with a random judge (guided decoding's classifier), seeded by ``judge_seed`` (default ``seed``)."""
    switch = random_switch(lm, seed=seed, scale=scale, **kwargs)
    switch.judge = torch.randn(switch.dim + 1, generator=torch.Generator().manual_seed(seed if judge_seed is None else judge_seed))
    return switch


def sample_texts(rng: random.Random, style: list[str], n: int, length: int = 12, p_style: float = 0.5) -> list[str]:
    """``n`` texts whose words come from ``style`` with probability ``p_style``, else from the shared filler."""
    return [" ".join(rng.choice(style) if rng.random() < p_style else rng.choice(FILLER) for _ in range(length)) for _ in range(n)]


def held(compute: ComputeThread) -> threading.Event:
    """Occupy the compute thread until the returned event is set, so requests pile up and share one batch."""
    release = threading.Event()
    compute.submit(release.wait)
    return release


def run_together(batcher: Batcher, requests: list[tuple]) -> list[Row]:
    """``requests`` (prompt, setting, seed, new tokens) submitted while the compute thread is held, so they share one
    batch; each one's finished :class:`Row`."""
    release = held(batcher.compute)
    streams = [batcher.stream(p, s, seed=seed, options=SamplingOptions(max_new_tokens=n)) for p, s, seed, n in requests]
    release.set()
    return [list(stream)[-1] for stream in streams]
