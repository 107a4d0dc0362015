"""Guided decoding and the switch's judge: a planted style direction is recovered, ε = 0 is the plain decode exactly,
and every piece keeps the candidate the judge likes best."""

from __future__ import annotations

import threading

import pytest
import torch
from conftest import random_switch
from tiny import judged_switch

import lmswitch as ls
from lmswitch.core import guided
from lmswitch.core.generate import candidate_seed, generate_tokens
from lmswitch.core.guided import _mean_continuation, loops, repetitive
from lmswitch.core.hidden import TokenStates
from lmswitch.core.judge import fit_judge, guide_scores, judge_logodds
from lmswitch.core.options import GUIDE_TOKENS, SamplingOptions
from lmswitch.core.switch import SwitchFileError

PROMPT = "the happy one was in a"


def _states(direction: torch.Tensor, n_units: int, tokens: int = 6, seed: int = 0) -> TokenStates:
    """Units of ``tokens`` head inputs each: noise plus ±direction by label (positives first)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.tensor([1.0] * (n_units // 2) + [-1.0] * (n_units - n_units // 2)).repeat_interleave(tokens)
    hidden = 1.5 * torch.randn(len(labels), len(direction), generator=g) + labels[:, None] * direction + 5.0
    unit = torch.arange(n_units).repeat_interleave(tokens) * 1_000_000
    return TokenStates(hidden, torch.zeros(len(labels), dtype=torch.long), labels, unit)


def test_the_judge_recovers_a_planted_direction_and_needs_both_sides():
    direction = torch.zeros(16)
    direction[3] = 1.0
    judge = fit_judge(_states(direction, 200))
    w = judge[:-1] / judge[:-1].norm()
    assert float(w[3]) > 0.8  # the planted coordinate dominates the fitted direction
    test = _states(direction, 100, seed=1)
    means = test.hidden.view(100, 6, 16).mean(1)
    right = (judge_logodds(judge, means) > 0) == (test.labels.view(100, 6)[:, 0] > 0)
    assert right.float().mean() > 0.9
    assert fit_judge(_states(direction, 6)) is None  # 3 units a side: too few to fit
    one_side = _states(direction, 40)
    one_side.labels.abs_()
    assert fit_judge(one_side) is None


def test_guide_scores_follow_the_sign_of_eps():
    judge = torch.tensor([1.0, 0.0, 0.5])
    means = torch.tensor([[2.0, 0.0], [-2.0, 0.0]])
    assert guide_scores([(judge, 4.0)], means).tolist() == [2.5, -1.5]
    assert guide_scores([(judge, -4.0)], means).tolist() == [-2.5, 1.5]
    assert guide_scores([(judge, 0.0)], means).tolist() == [0.0, 0.0]


def test_a_judge_is_saved_negated_and_dropped_by_a_sum(tiny_lm, tmp_path):
    s = random_switch(tiny_lm, seed=1)
    s.judge = torch.arange(s.dim + 1, dtype=torch.float32)
    back = ls.load_switch(s.save(tmp_path / "s.safetensors"))
    assert torch.equal(back.judge, s.judge)
    assert torch.equal((-s).judge, -s.judge) and torch.equal((-2.0 * s).judge, -s.judge) and torch.equal((0.5 * s).judge, s.judge)
    assert (s + s).judge is None
    plain = random_switch(tiny_lm, seed=2)
    assert ls.load_switch(plain.save(tmp_path / "p.safetensors")).judge is None
    with pytest.raises(SwitchFileError, match="judge"):
        ls.Switch(W=s.W, judge=torch.zeros(3))
    with pytest.raises(SwitchFileError, match="judge"):
        ls.Switch(W=s.W, judge=torch.full((s.dim + 1,), float("nan")))


def _judged(lm, seed: int):
    return judged_switch(lm, seed=seed, scale=30.0)


def test_eps_zero_rows_decode_exactly_as_without_guide(tiny_lm):
    s = _judged(tiny_lm, 3)
    plain = SamplingOptions(max_new_tokens=12)
    guided = SamplingOptions(max_new_tokens=12, guide=3)
    a = generate_tokens(tiny_lm, [PROMPT, "a"], [[(s, 0.0)], []], [5, 6], plain)
    b = generate_tokens(tiny_lm, [PROMPT, "a"], [[(s, 0.0)], []], [5, 6], guided)
    assert a.texts == b.texts and torch.equal(a.new_ids[a.new_mask.bool()], b.new_ids[b.new_mask.bool()])
    mixed = generate_tokens(tiny_lm, [PROMPT, PROMPT], [[(s, 0.0)], [(s, 3.0)]], [5, 5], guided)
    assert mixed.texts[0] == a.texts[0]  # an unsteered row beside a guided one is still the plain decode


def _best_candidate(lm, s, eps: float, seed: int, n: int) -> list[int]:
    """The first piece guided decoding should keep at ``eps``: the ``n`` candidates decoded alone with their seeds, the
    judge's best-scored at that ε among those that do not loop."""
    setting = [(s, eps)]
    pieces = [generate_tokens(lm, [PROMPT], [setting], [candidate_seed(seed, j)], SamplingOptions(max_new_tokens=GUIDE_TOKENS))
              for j in range(n)]
    prompt = pieces[0].prompt_ids[0][pieces[0].prompt_mask[0].bool()].tolist()
    news = [p.new_ids[0][p.new_mask[0].bool()].tolist() for p in pieces]
    assert len({tuple(x) for x in news}) > 1  # the candidates differ, so the choice means something
    score = guide_scores([(s.judge, eps)], _mean_continuation(lm, [prompt + x for x in news], [len(prompt)] * n))
    clean = [j for j in range(n) if not repetitive(lm.tokenizer.decode(news[j], skip_special_tokens=True))] or list(range(n))
    return news[max(clean, key=lambda j: float(score[j]))]


def test_each_piece_keeps_the_candidate_the_judge_likes_best(tiny_lm):
    """The first piece of a guided row is the best-scored of the ``guide`` candidates decoded alone with their seeds, at
    the row's own ε: with its sign (a judge read at |ε| would pick the same side's best at −3 as at +3)."""
    s, n = _judged(tiny_lm, 4), 3
    for eps in (3.0, -3.0):
        guided = generate_tokens(tiny_lm, [PROMPT], [[(s, eps)]], [7], SamplingOptions(max_new_tokens=GUIDE_TOKENS + 3, guide=n))
        got = guided.new_ids[0][guided.new_mask[0].bool()].tolist()
        assert got[:GUIDE_TOKENS] == _best_candidate(tiny_lm, s, eps, 7, n), eps
        assert eps < 0 or len(got) == GUIDE_TOKENS + 3  # (a row may end at EOS after its first piece)


def _spied(carried, caches: list, *args):
    out = carried(*args)
    caches.append(out[2])
    return out


def test_the_judge_reads_the_head_inputs_the_decode_recorded(tiny_lm, monkeypatch):
    """Each candidate's mean head input comes from the decode that wrote it (one step more per piece, to read the piece's
    last token) and the pieces each row chose, and the chosen candidates' KV cache goes on to the next piece: the same
    means, and so the same text, as reading every prefix and continuation again, over several pieces, with rows that
    repeat a prompt and rows of other lengths."""
    s = _judged(tiny_lm, 6)
    prompts, settings = [PROMPT, "a", PROMPT], [[(s, 3.0)], [(s, -2.0)], [(s, 5.0)]]
    opts = SamplingOptions(max_new_tokens=3 * GUIDE_TOKENS + 2, guide=3)
    runs: dict[str, list] = {"recorded": [], "read again": []}
    choose, recorded_sums = guided._choose, guided._recorded_sums

    def spy(run: str):
        return lambda lm, judges, means, continuations: runs[run].append(means) or choose(lm, judges, means, continuations)

    monkeypatch.setattr(guided, "_choose", spy("recorded"))
    monkeypatch.setattr(guided, "_recorded_sums", lambda *a: recorded_sums(*a) if recorded_sums(*a) is not None else pytest.fail("not recorded"))
    carried, caches = guided._carried, []
    monkeypatch.setattr(guided, "_carried", lambda *a: _spied(carried, caches, *a))
    got = generate_tokens(tiny_lm, prompts, settings, [1, 2, 3], opts)
    assert len(caches) >= 2 and all(c is not None for c in caches[:-1])  # carried from piece to piece (the last: no row goes on)
    monkeypatch.setattr(guided, "_choose", spy("read again"))
    monkeypatch.setattr(guided, "_recorded_sums", lambda *a: None)
    monkeypatch.setattr(guided, "_carried", lambda *a: (None, None, None))
    again = generate_tokens(tiny_lm, prompts, settings, [1, 2, 3], opts)
    monkeypatch.setattr(guided, "_carried", carried)
    assert got.texts == again.texts and len(runs["recorded"]) == len(runs["read again"]) > 3  # rows × pieces (fewer once a row ends)
    for a, b in zip(runs["recorded"], runs["read again"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    # a piece read again (its passes lacked one) leaves the rows' sums right for the recorded pieces after it
    calls = iter(range(100))
    monkeypatch.setattr(guided, "_choose", spy("mixed"))
    monkeypatch.setattr(guided, "_recorded_sums", lambda *a: None if next(calls) == 1 else recorded_sums(*a))
    runs["mixed"] = []
    assert generate_tokens(tiny_lm, prompts, settings, [1, 2, 3], opts).texts == again.texts
    for a, b in zip(runs["mixed"], runs["read again"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_a_cancelled_call_keeps_whole_pieces_and_no_prompt_is_looked_up_twice(tiny_lm, monkeypatch):
    """Cancelled while a piece decodes, the rows keep the pieces chosen before it (no judge runs on the cut piece); and
    where no prompt cache can be shared, the decode is not asked to look for one again."""
    s = _judged(tiny_lm, 7)
    prompts, settings, opts = [PROMPT, "a"], [[(s, 3.0)], [(s, 2.0)]], SamplingOptions(max_new_tokens=3 * GUIDE_TOKENS, guide=2)
    full = generate_tokens(tiny_lm, prompts, settings, [4, 5], opts)
    stop, decodes, decode = threading.Event(), [], guided._decode

    def cancelling(*args, **kwargs):
        decodes.append(kwargs.get("cache"))
        out = decode(*args, **kwargs)
        if len(decodes) == 2:
            stop.set()
        return out

    monkeypatch.setattr(guided, "_decode", cancelling)
    cut = guided.guided_tokens(tiny_lm, prompts, settings, [4, 5], opts, stop)
    assert len(decodes) == 2
    for r in range(2):
        whole = full.new_ids[r][full.new_mask[r].bool()].tolist()
        assert cut.new_ids[r][cut.new_mask[r].bool()].tolist() == whole[:GUIDE_TOKENS]
    looked_up = []
    monkeypatch.setattr(guided, "shared_prompts", lambda *a: looked_up.append(1))  # none to share
    decodes.clear()
    stop.clear()
    monkeypatch.setattr(guided, "_decode", lambda *a, **k: decodes.append(k["cache"]) or decode(*a, **k))
    assert guided.guided_tokens(tiny_lm, prompts, settings, [4, 5], opts).texts == full.texts
    assert decodes == [False] * 3 and len(looked_up) == 3  # asked once per piece, in guided decoding only


def test_the_recorded_sums_ignore_what_a_finished_rows_passes_hold():
    seen = [torch.zeros(2, 4, 3)] + [torch.tensor([[[v] * 3], [[1.0] * 3]]) for v in (2.0, float("nan"), float("inf"))]
    sums = guided._recorded_sums(seen, [[7], [7, 8, 9]], 3)  # row 0 ended after one token: its later passes are padding
    assert sums.tolist() == [[2.0] * 3, [3.0] * 3]
    assert guided._recorded_sums(seen, [[7], [7, 8, 9, 10]], 3) is None  # a token no pass read: read again instead


def test_loops_and_repetition_are_told_apart_from_plain_text():
    assert loops("Great, great day", 2) and not loops("great day, great", 2)
    assert loops("so so so", 3) and not loops("so so", 3)
    assert repetitive("Great job, Jamie. Great job, Jamie.") and repetitive("a fine fine day")
    assert not repetitive("Great service. Great work. The staff were kind and the food was good.")


@pytest.mark.parametrize("options, match", [({"guide": 0}, "guide"), ({"guide": 9}, "guide"), ({"guide": 2.0}, "guide"),
                                            ({"guide": 2, "temperature": 0}, "choose one"), ({"guide": 2, "best_of": 2}, "choose one"),
                                            ({"guide": 2, "adaptive": True}, "choose one")])
def test_bad_guide_settings_are_refused(tiny_lm, options, match):
    with pytest.raises(ValueError, match=match):
        ls.generate(tiny_lm, PROMPT, [], **options)


def test_a_steering_switch_without_a_judge_cannot_guide(tiny_lm):
    s = random_switch(tiny_lm, seed=5)
    with pytest.raises(ValueError, match="has no judge"):
        ls.generate(tiny_lm, PROMPT, [(s, 2.0)], guide=2, max_new_tokens=4)
    assert ls.generate(tiny_lm, PROMPT, [(s, 0.0)], guide=2, max_new_tokens=4) == ls.generate(tiny_lm, PROMPT, [], max_new_tokens=4)
