"""core/hidden.py called directly on tiny models: text checks, windows that score every position once, the head
input predicting each token (with and without a prompt or BOS), per-token log-probabilities, and batched encoding."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import CONTEXT, EOS_ID, FILLER, build_lm, make_tokenizer
from tokenizers import processors

from lmswitch.core import hidden
from lmswitch.core.hidden import PADDING_SHARE, _batches, check_text, encode_text, encode_texts, prefix_ids, target_logprobs, windows

TEXT = "the kind and warm people smile with joy but the cold one was bitter"


def assert_close(actual: torch.Tensor, expected: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> None:
    assert actual.shape == expected.shape
    assert torch.allclose(actual.float(), expected.float(), atol=atol, rtol=rtol), (
        f"max abs diff {(actual.float() - expected.float()).abs().max().item():.3g}"
    )


def ids_of(lm, text: str) -> list[int]:
    return lm.tokenizer(text, add_special_tokens=False).input_ids


@pytest.fixture(scope="module")
def bos_lm():
    """A tiny llama whose tokenizer starts every text with a BOS token ([EOS] here, as the configs say), and has a chat template."""
    tok = make_tokenizer()
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(single="[EOS] $A", special_tokens=[("[EOS]", EOS_ID)])
    tok.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}{% if add_generation_prompt %}she was{% endif %}"
    return build_lm("llama", tokenizer=tok)


# --- check_text --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "match"), [(42, "is a int, not a string"), (None, "not a string"), ("", "empty"),
                                             (" \n\t ", "empty or whitespace"), ("the\x00one", "NUL bytes")])
def test_check_text_refuses_what_is_not_text(text, match):
    with pytest.raises(ValueError, match=match):
        check_text(text)


def test_check_text_names_the_input_returns_it_and_bounds_its_size(monkeypatch):
    assert check_text(" the kind one ") == " the kind one "
    with pytest.raises(ValueError, match="the prompt is empty"):
        check_text("", what="prompt")
    monkeypatch.setattr(hidden, "MAX_TEXT_CHARS", 10)
    assert check_text("x" * 10) == "x" * 10
    with pytest.raises(ValueError, match="11 characters; the limit is 10"):
        check_text("x" * 11)


# --- windows -----------------------------------------------------------------------------------


def test_windows_predict_every_position_exactly_once():
    for n in range(1, 40):
        ids = list(range(100, 100 + n))
        for length in range(2, 12):
            for overlap in range(1, length):
                parts = windows(ids, length, overlap)
                predicted = []  # the ids predicted by the scored positions of each window
                for window, first in parts:
                    assert 1 <= len(window) <= length and window == ids[ids.index(window[0]) :][: len(window)]
                    predicted += window[first + 1 :]
                assert predicted == ids[1:], (n, length, overlap)
                if n <= length:
                    assert parts == [(ids, 0)]


def test_windows_keep_the_overlap_as_context():
    ids = list(range(30))
    parts = windows(ids, 10, 4)
    assert len(parts) > 1 and parts[0] == (ids[:10], 0)
    for (previous, _), (window, first) in zip(parts, parts[1:], strict=False):
        assert window[:4] == previous[-4:]  # a window starts with the last 4 tokens of the one before
        assert first == 3  # and scores from there: the first scored position has those 4 tokens as context


# --- encode_text --------------------------------------------------------------------------------


@torch.no_grad()
def test_each_row_is_the_head_input_predicting_its_token(tiny_lm):
    enc = encode_text(tiny_lm, TEXT)
    ids = ids_of(tiny_lm, TEXT)
    assert enc.ids == ids and enc.n_tokens == len(ids) and enc.windows == 1
    assert enc.hidden.shape == (len(ids), tiny_lm.hidden_size)
    assert enc.scored.tolist() == [False] + [True] * (len(ids) - 1)  # no BOS, no prompt: nothing predicts the first token
    assert torch.equal(enc.hidden[0], torch.zeros(tiny_lm.hidden_size))
    assert_close(enc.hidden[1:], tiny_lm.final_hidden(torch.tensor([ids]))[0, :-1])
    assert [TEXT[a:b] for a, b in enc.offsets] == TEXT.split()


@torch.no_grad()
def test_a_prompt_is_context_and_the_first_token_is_scored(gpt2_lm):
    prompt = "she was"
    enc = encode_text(gpt2_lm, TEXT, prompt=prompt)
    p, ids = ids_of(gpt2_lm, prompt), ids_of(gpt2_lm, TEXT)
    assert enc.ids == ids and bool(enc.scored.all())
    assert_close(enc.hidden, gpt2_lm.final_hidden(torch.tensor([p + ids]))[0, len(p) - 1 : -1])


@torch.no_grad()
def test_a_bos_token_is_context_for_the_first_token(bos_lm):
    assert prefix_ids(bos_lm) == [EOS_ID]
    enc = encode_text(bos_lm, TEXT)
    ids = ids_of(bos_lm, TEXT)
    assert enc.ids == ids and bool(enc.scored.all())
    assert_close(enc.hidden, bos_lm.final_hidden(torch.tensor([[EOS_ID] + ids]))[0, :-1])


def test_prefix_ids_are_the_prompt_or_the_start_tokens(gpt2_lm, bos_lm):
    assert prefix_ids(gpt2_lm) == []  # the tiny tokenizer adds no start token
    assert prefix_ids(gpt2_lm, "she was") == ids_of(gpt2_lm, "she was")
    assert prefix_ids(bos_lm, "she was") == [EOS_ID] + ids_of(bos_lm, "she was")
    # chat: the templated prompt, with no second BOS on top of what the template writes
    assert prefix_ids(bos_lm, "the kind one", chat=True) == ids_of(bos_lm, "the kind one she was")


@torch.no_grad()
def test_a_long_text_is_encoded_in_windows_with_full_context(gpt2_lm):
    words = [FILLER[i % len(FILLER)] for i in range(CONTEXT * 2 + 5)]
    text = " ".join(words)
    enc = encode_text(gpt2_lm, text)
    ids = ids_of(gpt2_lm, text)
    assert enc.n_tokens == len(ids) == len(words)
    assert enc.windows == len(windows(ids, CONTEXT, CONTEXT // 4)) > 1
    assert torch.isfinite(enc.hidden).all() and enc.scored.tolist() == [False] + [True] * (len(ids) - 1)
    assert_close(enc.hidden[1:CONTEXT], gpt2_lm.final_hidden(torch.tensor([ids[:CONTEXT]]))[0, :-1])  # the first window: exact
    # every later token: the row of a plain forward pass over the window that scores it (windows of positions, not ids)
    checked = CONTEXT - 1
    for positions, first in windows(list(range(len(ids))), CONTEXT, CONTEXT // 4)[1:]:
        assert first == CONTEXT // 4 - 1  # at least that many tokens of context before the first scored one
        h = gpt2_lm.final_hidden(torch.tensor([[ids[i] for i in positions]]))[0]
        assert_close(enc.hidden[positions[first + 1] : positions[-1] + 1], h[first:-1])
        checked += len(positions) - 1 - first
    assert checked == len(ids) - 1


def test_encode_text_checks_the_text(gpt2_lm):
    with pytest.raises(ValueError, match="NUL"):
        encode_text(gpt2_lm, "the\x00one")
    with pytest.raises(ValueError, match="empty"):
        encode_text(gpt2_lm, "   ")


def test_pieces_tile_the_text_exactly(gpt2_lm):
    text = "  the kind\n\none  was  "
    enc = encode_text(gpt2_lm, text)
    b = enc.boundaries()
    assert b[0] == 0 and b[-1] == len(text) and b == sorted(b) and len(b) == enc.n_tokens + 1
    assert "".join(enc.pieces()) == text
    assert [p.strip() for p in enc.pieces()] == ["the", "kind", "one", "was"]


# --- target_logprobs ----------------------------------------------------------------------------


@torch.no_grad()
def test_target_logprobs_are_the_head_logprobs_of_the_targets(tiny_lm, monkeypatch):
    enc = encode_text(tiny_lm, TEXT, prompt="she was")
    targets = torch.tensor(enc.ids)
    M = torch.randn(tiny_lm.hidden_size, tiny_lm.hidden_size, generator=torch.Generator().manual_seed(0)) * 0.1
    out = target_logprobs(tiny_lm, enc.hidden, targets, [None, M])
    assert out.shape == (2, len(targets)) and out.dtype == torch.float64
    rows = torch.arange(len(targets))
    assert_close(out[0], tiny_lm.head_logprobs(enc.hidden)[rows, targets])
    assert_close(out[1], tiny_lm.head_logprobs(enc.hidden, M)[rows, targets])
    assert not torch.allclose(out[0], out[1])
    monkeypatch.setattr(hidden, "HEAD_CHUNK", 3)  # several head chunks give the same numbers
    assert_close(target_logprobs(tiny_lm, enc.hidden, targets, [None, M]), out, atol=1e-6, rtol=1e-6)


# --- encode_texts -------------------------------------------------------------------------------


@torch.no_grad()
def test_encode_texts_scores_every_next_token_once_with_its_label(llama_lm):
    long_text = " ".join(FILLER[i % len(FILLER)] for i in range(22))  # windows of 8 tokens, the last one shorter
    texts = ["the kind one", long_text, "a cold and bitter one was there"]
    labels = [1.0, -1.0, 0.5]
    states = encode_texts(llama_lm, texts, labels, chunk_tokens=8, block=4)
    n = len(states.targets)
    assert states.hidden.shape == (n, llama_lm.hidden_size) and states.labels.shape == states.unit.shape == (n,)
    text_of = states.unit // 1_000_000
    for t, text in enumerate(texts):
        ids = ids_of(llama_lm, text)
        mine = text_of == t
        assert int(mine.sum()) == len(ids) - 1  # every next token, once, across windows
        assert sorted(states.targets[mine].tolist()) == sorted(ids[1:])
        assert bool((states.labels[mine] == labels[t]).all())
        assert len(set((states.unit[mine] % 1_000_000).tolist())) == math.ceil((len(ids) - 1) / 4)  # blocks of 4 tokens
    for t in (0, 2):  # short texts are one window each: their rows are a plain forward pass, in order
        ids = ids_of(llama_lm, texts[t])
        mine = text_of == t
        assert states.targets[mine].tolist() == ids[1:]
        assert_close(states.hidden[mine], llama_lm.final_hidden(torch.tensor([ids]))[0, :-1])


def test_texts_kept_whole_are_what_encode_text_reads(llama_lm):
    """The training's one body pass also gives its documents whole (a lens then reads them without a pass of its own):
    a text in one window as encode_text reads it; a long one, every row from the window that scored it, in order."""
    short, long_text = "the kind one was warm", " ".join(FILLER[i % len(FILLER)] for i in range(22))  # windows of 8
    states = encode_texts(llama_lm, [short, "a cold one", long_text], [1.0, -1.0, 1.0], chunk_tokens=8, block=1, keep=[0, 2])
    assert sorted(states.texts) == [0, 2]
    one, alone = states.texts[0], encode_text(llama_lm, short)
    assert (one.text, one.ids, one.offsets, one.windows) == (alone.text, alone.ids, alone.offsets, 1)
    assert torch.equal(one.scored, alone.scored)
    assert_close(one.hidden, alone.hidden)
    whole, mine = states.texts[2], states.unit // 1_000_000 == 2
    position = states.unit[mine] % 1_000_000  # block 1: a row's unit is its position, which predicts token position + 1
    assert whole.ids == ids_of(llama_lm, long_text) and whole.windows > 1 and not whole.scored[0] and whole.scored[1:].all()
    assert torch.equal(whole.hidden[position + 1], states.hidden[mine])
    assert torch.tensor(whole.ids)[position + 1].tolist() == states.targets[mine].tolist()
    assert encode_texts(llama_lm, [short], [1.0], chunk_tokens=8, block=1).texts == {}  # none kept unless asked


def test_no_text_is_kept_whole_where_a_lens_reads_after_start_tokens(bos_lm):
    """encode_text reads a text after the tokenizer's BOS, training does not: their readings would differ, so none is
    kept and a lens reads the text itself."""
    assert encode_texts(bos_lm, ["the kind one was warm"], [1.0], chunk_tokens=8, block=1, keep=[0]).texts == {}


def test_encode_texts_refuses_a_text_of_one_token(llama_lm):
    with pytest.raises(ValueError, match=r"text #2 \('kind'\) has 1 token\(s\)"):
        encode_texts(llama_lm, ["the kind one", "kind"], [1.0, 1.0], chunk_tokens=64, block=16)


def test_token_blocks_follow_the_document_whatever_the_window_order(gpt2_lm):
    """A long text is encoded in windows (the shorter last one first); block ids must still run along the document."""
    from lmswitch.core.hidden import encode_texts

    text = " ".join(["the happy one was kind and warm"] * 4)  # 28 tokens: windows of 8 with overlap 2
    data = encode_texts(gpt2_lm, [text], [1.0], chunk_tokens=8, block=4)
    ids = gpt2_lm.tokenizer(text, add_special_tokens=False).input_ids
    for b in data.unit.unique().tolist():  # block b holds exactly the document's targets b·4 … b·4+3
        assert sorted(data.targets[data.unit == b].tolist()) == sorted(ids[1 + 4 * b : 1 + 4 * (b + 1)])
    assert torch.bincount(data.unit).tolist() == [4] * (len(ids) // 4 - 1) + [len(ids) - 1 - 4 * (len(ids) // 4 - 1)]


def test_body_passes_hold_little_padding_and_stay_within_budget():
    """A document's short last window must not stretch thirty short texts to its width (padding costs compute)."""
    lengths = sorted([7, 9, 12, 14, 16, 19, 20, 21, 23, 25, 28, 31, 33] * 3 + [122, 512, 512, 512, 512, 512, 512, 512, 512, 900])
    batches = _batches([([0] * n,) for n in lengths], budget=4096)
    assert [len(p[0]) for b in batches for p in b] == lengths  # every piece once, in order
    for b in batches:
        widths = [len(p[0]) for p in b]
        padded = len(b) * max(widths)
        assert len(b) == 1 or (padded <= 4096 and padded - sum(widths) <= PADDING_SHARE * padded), widths
    assert [len(p[0]) for p in next(b for b in batches if any(len(p[0]) == 122 for p in b))] == [122]


def test_continuations_share_a_body_pass_and_match_one_by_one(tiny_lm, monkeypatch):
    texts = [" alpha beta gamma", " delta", " " + " ".join(["epsilon zeta"] * 30)]
    monkeypatch.setattr(hidden, "WINDOW_TOKENS", 40)  # the long one goes through windows, one by one
    calls = []
    real = tiny_lm.final_hidden
    monkeypatch.setattr(tiny_lm, "final_hidden", lambda ids, *a, **k: calls.append(tuple(ids.shape)) or real(ids, *a, **k))
    together = hidden.encode_continuations(tiny_lm, texts, prompt="the cat")
    assert calls[-1][0] == 2 and len(calls) >= 3  # the two short ones in one pass, the long one in its windows
    monkeypatch.undo()
    monkeypatch.setattr(hidden, "WINDOW_TOKENS", 40)
    for enc, text in zip(together, texts, strict=True):
        alone = encode_text(tiny_lm, text, prompt="the cat")
        assert enc.ids == alone.ids and enc.offsets == alone.offsets and torch.equal(enc.scored, alone.scored)
        torch.testing.assert_close(enc.hidden, alone.hidden, rtol=1e-5, atol=1e-5)
