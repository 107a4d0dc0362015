"""Tiny random models and a real (offline) word-level tokenizer for fast CPU tests.

Nothing here touches the network or the Hugging Face hub: the models are built
from configs with seeded random weights and the tokenizer from a fixed word list.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from transformers import (
    CohereConfig,
    CohereForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    GraniteConfig,
    GraniteForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Gradio keeps every file it serves or receives under GRADIO_TEMP_DIR (default /tmp/gradio), and leaves them there: the
# tests' app servers (which inherit it) and clients use a folder of their own, removed when the tests end. Set before
# anything imports gradio (some of its modules read it once, on import).
os.environ["GRADIO_TEMP_DIR"] = tempfile.mkdtemp(prefix="lmswitch-tests-gradio-")
atexit.register(shutil.rmtree, os.environ["GRADIO_TEMP_DIR"], ignore_errors=True)

# The models are tiny: one intra-op thread is much faster than several (which spin
# and fight over the cores, especially when other processes run beside the tests).
torch.set_num_threads(1)

from tiny import (  # noqa: E402, F401  (re-exported: the tests import them from here)
    EOS_ID,
    FILLER,
    PAD_ID,
    SPECIALS,
    UNK_ID,
    VOCAB,
    VOCAB_SIZE,
    WORDS,
    WORDS_A,
    WORDS_B,
    make_tokenizer,
    random_switch,
)

from lmswitch.core.models import LanguageModel  # noqa: E402
from lmswitch.core.switch import Switch  # noqa: E402
from lmswitch.io.resources import examples_dir  # noqa: E402

CONTEXT = 64  # max positions of every tiny model
# a card's transfer record as ls.transfer writes it (keys in its order)
TRANSFER_RECORD = {"source_switch": "mood", "source_model": "a", "source_fingerprint": "f", "anchors": 3600,
                   "heldout_anchors": 400, "heldout_r2": 0.93, "heldout_top1": 0.71, "method": "procrustes", "ridge": None,
                   "eps_scale": 0.5, "source_recommended_eps": 4.0, "scaled_eps": 2.0, "example_anchors": ["the", "cat"]}
FAMILIES = ["gpt2", "llama", "gpt_neox", "qwen2"]
SCALED_FAMILIES = {"granite": 1 / 8, "cohere": 0.25}  # family → the factor its logits get after the head

def _config(family: str, hidden: int, init: float):
    common = dict(vocab_size=VOCAB_SIZE, bos_token_id=EOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID, initializer_range=init)
    if family == "gpt2":
        return GPT2LMHeadModel, GPT2Config(
            n_positions=CONTEXT, n_embd=hidden, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **common
        )
    body = dict(
        hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=CONTEXT
    )
    if family == "llama":
        return LlamaForCausalLM, LlamaConfig(num_key_value_heads=2, **body, **common)
    if family == "gpt_neox":
        return GPTNeoXForCausalLM, GPTNeoXConfig(**body, **common)
    if family == "qwen2":
        return Qwen2ForCausalLM, Qwen2Config(num_key_value_heads=1, **body, **common)
    if family == "granite":  # divides its logits by logits_scaling after the head
        return GraniteForCausalLM, GraniteConfig(num_key_value_heads=2, logits_scaling=8.0, **body, **common)
    if family == "cohere":  # multiplies its logits by logit_scale after the head
        return CohereForCausalLM, CohereConfig(num_key_value_heads=2, logit_scale=0.25, **body, **common)
    raise ValueError(family)


def build_lm(
    family: str, *, seed: int = 0, hidden: int = 32, init: float = 0.02, tokenizer: PreTrainedTokenizerFast | None = None
) -> LanguageModel:
    """A tiny random causal LM of ``family`` wrapped in :class:`LanguageModel`.

    ``init`` is the weight init scale; a larger one gives peakier next-token distributions.
    """
    cls, config = _config(family, hidden, init)
    torch.manual_seed(seed)
    model = cls(config)
    return LanguageModel(model=model, tokenizer=tokenizer or make_tokenizer(), name=f"tiny-{family}-s{seed}-d{hidden}")


def random_ids(lm: LanguageModel, batch: int, length: int, *, seed: int = 0) -> torch.Tensor:
    """Token ids of ordinary words (no specials), shape (batch, length)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(len(SPECIALS), lm.vocab_size, (batch, length), generator=g)


def tiny_style_data(root: Path) -> None:
    """A miniature of lmswitch/data/styles for the tiny vocabulary: 20 pairs per style (test_pretrained, test_report)."""
    rows = [(" ".join([WORDS_A[i % 10], "the", WORDS_A[(i + 3) % 10], "was", "it"]),
             " ".join([WORDS_B[i % 10], "the", WORDS_B[(i + 3) % 10], "was", "it"])) for i in range(20)]
    for folder, a, b in (("sentiment", "positive.txt", "negative.txt"), ("toxicity", "civil.txt", "toxic.txt"),
                         ("formality", "formal.txt", "informal.txt")):
        (root / folder).mkdir(parents=True)
        (root / folder / a).write_text("\n".join(r[0] for r in rows), encoding="utf-8")
        (root / folder / b).write_text("\n".join(r[1] for r in rows), encoding="utf-8")


@pytest.fixture(scope="session")
def tokenizer() -> PreTrainedTokenizerFast:
    return make_tokenizer()


@pytest.fixture(scope="session", params=FAMILIES)
def tiny_lm(request, tokenizer) -> LanguageModel:
    """One tiny random model per family (session-scoped; tests must not modify it)."""
    return build_lm(request.param, tokenizer=tokenizer)


@pytest.fixture(scope="session")
def gpt2_lm(tokenizer) -> LanguageModel:
    return build_lm("gpt2", tokenizer=tokenizer)


@pytest.fixture(scope="session")
def llama_lm(tokenizer) -> LanguageModel:
    return build_lm("llama", tokenizer=tokenizer)


@pytest.fixture(scope="session")
def make_lm(tokenizer) -> Callable[..., LanguageModel]:
    """Factory for extra tiny models: ``make_lm("llama", seed=1, hidden=48)``."""

    def make(family: str, **kwargs) -> LanguageModel:
        return build_lm(family, tokenizer=tokenizer, **kwargs)

    return make


# --- the real embedded model (SmolLM2-135M-Instruct, installed offline by `make test`) -----------------

EXAMPLES = examples_dir()


@contextmanager
def all_threads():
    """Real-model work is much faster on every core (the tiny-model tests run on one)."""
    before = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def real_model_threads():
    """Use in real-model test modules: ``pytestmark = pytest.mark.usefixtures("real_model_threads")``."""
    with all_threads():
        yield


def side_by_side(commands: list[list[str]], timeout: float = 600, **popen) -> list[subprocess.CompletedProcess]:
    """Run ``commands`` at once (text output captured) and wait for all: their single-threaded starts (imports, a model's
    load) overlap on the cores. Only for results that do not depend on timing; each must succeed, or this fails with
    the tails of their stderr."""
    started = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen) for c in commands]
    outputs = [p.communicate(timeout=timeout) for p in started]
    runs = [subprocess.CompletedProcess(p.args, p.returncode, *out) for p, out in zip(started, outputs, strict=True)]
    assert all(r.returncode == 0 for r in runs), "".join(r.stderr[-2000:] for r in runs)
    return runs


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail saying ``what`` was awaited after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def digest(folder: Path) -> dict[str, str]:
    """sha256 of every file in ``folder`` and its subfolders, by path within it: to check that nothing was written,
    changed or removed there."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def lines(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="session")
def lm() -> LanguageModel:
    from lmswitch import load_model

    return load_model()


@pytest.fixture(scope="session")
def lm32(lm) -> LanguageModel:
    """The embedded model in float32: what exact comparisons use (``lm`` is bfloat16 where the CPU is fast at it), and the
    launched app's dtype in these tests."""
    from lmswitch import load_model

    return lm if lm.model.dtype == torch.float32 else load_model(dtype="float32")


@pytest.fixture(scope="session")
def sentiment(lm) -> Switch:
    """A sentiment switch from the first 30 + 30 shipped example sentences (the last 10 + 10 are held out)."""
    from lmswitch import train_switch

    pos = lines(EXAMPLES / "sentiment_positive.txt")[:30]
    neg = lines(EXAMPLES / "sentiment_negative.txt")[:30]
    with all_threads():
        return train_switch(lm, pos, neg, name="sentiment")


# --- the real web app (app.py) in a subprocess, for the gradio_client and browser tests ------------------


API_KEY = "lmswitch-test-key"  # the launched app's key for its OpenAI-compatible endpoints


_STARTED: list = []  # the launched app of `app_server`, started when the run is known to need it


def _launch_app(folder: Path):
    from app_server import AppServer

    return AppServer(folder, api_key=API_KEY, args=("--dtype", "float32"))  # results comparable bit for bit


def pytest_collection_finish(session):
    """The launched app takes ~10 s to start, mostly one core importing and loading its model: when a selected test needs
    it, it starts now, beside the tests before its first user, rather than in that test's setup."""
    option = session.config.option
    if option.collectonly or option.showfixtures or session.testsfailed:  # nothing will run (or collection failed)
        return
    if any("app_server" in item.fixturenames for item in session.items):
        folder = Path(tempfile.mkdtemp(prefix="lmswitch-test-app-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _STARTED.append(_launch_app(folder))


def pytest_sessionfinish(session):
    while _STARTED:  # no test took it (the run stopped early)
        _STARTED.pop().stop()


@pytest.fixture(scope="session")
def app_server(tmp_path_factory):
    """``python app.py --dtype float32`` on a free port with a private copy of the shipped switches, ready to serve."""
    server = _STARTED.pop() if _STARTED else _launch_app(tmp_path_factory.mktemp("app"))
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
