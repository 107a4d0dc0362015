"""The evaluation harness on tiny models: metric arithmetic on known inputs, exact perplexities, shapes, figures, CLI."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from conftest import EOS_ID, random_switch
from tiny import judged_switch

from lmswitch.core.generate import generate_tokens
from lmswitch.core.options import SamplingOptions
from lmswitch.harness.evaluate import (
    PROTOCOL,
    Protocol,
    TextScores,
    continuation_nll,
    decoded_nll,
    distinct_n,
    evaluate,
    evaluate_grid,
    evaluate_settings,
    evaluate_sweep,
    formality_scores,
    perplexity_from_nll,
    sentiment_scores,
    text_scores,
    toxicity_scores,
    toxicity_summary,
)
from lmswitch.harness.figures import grid_figure, sweep_figure
from lmswitch.harness.options import load_prompts
from lmswitch.lenses.spans import token_changes

PROMPTS = ["the happy one", "she was", "they love the"]


def test_distinct_n_known_values():
    assert distinct_n(["a b a b"], 1) == 0.5  # {a, b} of 4
    assert distinct_n(["a b a b"], 2) == pytest.approx(2 / 3)  # {ab, ba} of ab, ba, ab
    assert distinct_n(["a b a b"], 3) == pytest.approx(2 / 2)  # aba, bab
    assert distinct_n(["x y", "x y"], 2) == 0.5  # n-grams are pooled over a prompt's samples
    assert distinct_n(["one"], 2) == 0.0 and distinct_n([], 1) == 0.0
    with pytest.raises(ValueError):
        distinct_n(["a"], 0)


def test_perplexity_and_toxicity_arithmetic():
    assert perplexity_from_nll([math.log(4) * 3, math.log(4) * 5], [3, 5]) == pytest.approx(4.0)
    assert perplexity_from_nll([2.0, 0.0], [1, 1]) == pytest.approx(math.e)  # token-weighted, not a mean of ratios
    assert math.isnan(perplexity_from_nll([], []))
    # two prompts × three samples: maxima 0.9 and 0.2 → average 0.55, one of two prompts toxic
    assert toxicity_summary([0.1, 0.9, 0.3, 0.2, 0.0, 0.1], 3) == pytest.approx((0.55, 0.5))
    assert toxicity_summary([0.5, 0.5], 1) == (0.5, 0.0)  # strictly above 0.5 counts
    with pytest.raises(ValueError):
        toxicity_summary([0.1, 0.2, 0.3], 2)


def test_scorers_on_known_texts():
    pos, neg = sentiment_scores(["I love this wonderful day", "I hate this awful day"])
    assert pos > 0.5 and neg < -0.5
    rude, polite = toxicity_scores(["shut up you stupid idiot", "thank you for the kind help"])
    assert rude > 0.8 and polite < 0.2
    formal, casual = formality_scores(["We regret to inform you that the meeting has been postponed.", "heads up, meeting's pushed lol"])
    assert formal > 0.5 > casual
    assert sentiment_scores([]) == [] and toxicity_scores([]) == [] and formality_scores([]) == []


def test_shipped_prompts_and_errors(tmp_path):
    assert len(load_prompts("neutral")) == 100 and len(load_prompts("provocative")) == 100
    assert load_prompts("neutral", 7) == load_prompts("neutral")[:7]
    assert max(abs(x) for x in sentiment_scores(load_prompts("neutral"))) <= 0.1
    f = tmp_path / "p.txt"
    f.write_text("one\n\n two \n", encoding="utf-8")
    assert load_prompts(f) == ["one", "two"]
    with pytest.raises(ValueError, match="no prompt set"):
        load_prompts("nonexistent-set")
    (tmp_path / "empty.txt").write_text("\n \n", encoding="utf-8")
    with pytest.raises(ValueError, match="no prompts"):
        load_prompts(tmp_path / "empty.txt")
    with pytest.raises(ValueError, match="positive integer"):
        load_prompts("neutral", 0)


def _uniform(lm):
    """Zero the output head: every next-token distribution is uniform over the vocabulary."""
    head = lm.head
    saved = head.weight.detach().clone()
    with torch.no_grad():
        head.weight.zero_()
    return saved


def test_perplexity_of_a_uniform_model_is_the_vocabulary_size(make_lm):
    lm = make_lm("gpt2", seed=3)  # untied? restore afterwards either way
    saved = _uniform(lm)
    try:
        gen = generate_tokens(lm, PROMPTS, [[]] * 3, [0, 1, 2], SamplingOptions(max_new_tokens=6))
        nll, counts = continuation_nll(lm, gen.prompt_ids, gen.prompt_mask, gen.new_ids, gen.new_mask)
        assert perplexity_from_nll(nll, counts) == pytest.approx(lm.vocab_size, rel=1e-5)
        assert counts == gen.new_mask.sum(dim=1).tolist()  # every kept token, EOS included, and nothing after it
    finally:
        with torch.no_grad():
            lm.head.weight.copy_(saved)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_continuation_nll_equals_unpadded_forward_passes(make_lm, family):
    """Batched, left-padded scoring (with position ids) equals scoring each row alone."""
    lm = make_lm(family, seed=1, init=0.3)
    gen = generate_tokens(lm, PROMPTS, [[]] * 3, [5, 6, 7], SamplingOptions(max_new_tokens=8))
    nll, counts = continuation_nll(lm, gen.prompt_ids, gen.prompt_mask, gen.new_ids, gen.new_mask, rows=2)
    for b in range(3):
        prompt = gen.prompt_ids[b][gen.prompt_mask[b].bool()]
        new = gen.new_ids[b][gen.new_mask[b].bool()]
        ids = torch.cat([prompt, new])[None]
        with torch.no_grad():
            logp = torch.log_softmax(lm.model(ids).logits[0].float(), -1)
        expect = -sum(float(logp[len(prompt) - 1 + t, new[t]]) for t in range(len(new)))
        assert counts[b] == len(new)
        assert nll[b] == pytest.approx(expect, rel=1e-4, abs=1e-4)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_steered_decodes_own_head_inputs_score_it_as_a_body_pass_does(make_lm, family):
    """The harness scores sampled rows from the head inputs their decode recorded: the same NLL as a body pass over
    prompt and text, for steered rows of different settings and rows that end early at EOS."""
    lm = make_lm(family, seed=2, init=0.3)
    switch = random_switch(lm, seed=4, scale=0.3)
    settings = [[], [(switch, 3.0)], [(switch, -3.0)]]
    opts = SamplingOptions(max_new_tokens=16, temperature=3.0, top_p=1.0)
    with lm.head_inputs() as seen:
        gen = generate_tokens(lm, PROMPTS, settings, [4, 5, 6], opts)
    assert not gen.new_mask.all()  # some row ended early: its padding is not scored
    nll, counts = decoded_nll(lm, seen, gen)
    expect, expect_counts = continuation_nll(lm, gen.prompt_ids, gen.prompt_mask, gen.new_ids, gen.new_mask)
    assert counts == expect_counts
    assert nll == pytest.approx(expect, rel=1e-4, abs=1e-4)
    assert decoded_nll(lm, seen[:-1], gen) is None  # passes that do not match the tokens are not used


def test_rows_are_scored_from_their_decode_only_where_it_read_their_plain_prompt(make_lm, monkeypatch):
    """Instructed rows (the prompting baseline) were decoded after an instruction, so their decode's states are not
    the plain prompt's: a body pass scores them. So it does with ``score_from_decode`` off, and where a decode's passes
    do not match its tokens; each way the scores are the body pass's exactly."""
    from lmswitch.harness import evaluate as harness

    lm = make_lm("llama", seed=2, init=0.3)
    monkeypatch.setattr(lm.tokenizer, "chat_template", "{% for m in messages %}{{ m['content'] }} {% endfor %}")
    protocol = Protocol(samples=2, max_new_tokens=6)
    by_body = evaluate_settings(lm, [[]], PROMPTS, replace(protocol, score_from_decode=False))[0]
    calls = []
    real = harness.decoded_nll
    monkeypatch.setattr(harness, "decoded_nll", lambda *a: calls.append(1) or real(*a))
    assert evaluate_settings(lm, [[]], PROMPTS, protocol)[0].perplexity == pytest.approx(by_body.perplexity, rel=1e-4)
    assert calls  # plain rows: scored from their decode
    calls.clear()
    evaluate_settings(lm, [[]], PROMPTS, replace(protocol, score_from_decode=False))
    instructed = evaluate_settings(lm, [[]], PROMPTS, protocol, instructions=["be kind"])[0]
    assert not calls  # neither rows with scoring from the decode off nor instructed rows
    expect = evaluate_settings(lm, [[]], PROMPTS, replace(protocol, score_from_decode=False), instructions=["be kind"])[0]
    assert instructed.perplexity == expect.perplexity
    monkeypatch.setattr(harness, "decoded_nll", lambda *a: None)  # passes that do not match: the body pass instead
    assert evaluate_settings(lm, [[]], PROMPTS, protocol)[0].perplexity == by_body.perplexity


def test_new_mask_stops_after_the_first_eos(llama_lm):
    """A row that samples EOS ends there: its mask keeps the EOS and nothing after it. (Seeds 21 and 38 draw EOS as the
    4th and 5th new token of the first and last rows at this temperature; the middle row runs to the end.)"""
    gen = generate_tokens(llama_lm, PROMPTS, [[]] * 3, [21, 22, 38], SamplingOptions(max_new_tokens=12, temperature=3.0, top_p=1.0))
    firsts = [ids.tolist().index(EOS_ID) if EOS_ID in ids.tolist() else None for ids in gen.new_ids]
    assert firsts == [3, None, 4], firsts  # the rule below is checked on rows that end early, not only on full ones
    for ids, mask, first in zip(gen.new_ids, gen.new_mask, firsts, strict=True):
        ends = len(ids) if first is None else first + 1
        assert mask.tolist() == [1] * ends + [0] * (len(ids) - ends)


def test_evaluate_shapes_coupling_and_sweeps(llama_lm):
    lm = llama_lm
    switch = random_switch(lm, seed=4, scale=30.0, name="s")
    other = random_switch(lm, seed=5, scale=30.0, name="o")
    protocol = Protocol(samples=2, max_new_tokens=5, batch_size=4)  # 6 rows in two batches
    base = evaluate(lm, [], PROMPTS, protocol)
    assert base.prompts == 3 and base.samples == 2 and len(base.texts) == 6
    assert [t.prompt for t in base.texts] == [p for p in PROMPTS for _ in range(2)]
    for key in ("positive_share", "negative_share", "toxicity_prob", "avg_max_toxicity", "dist1", "dist2", "dist3", "formal_share"):
        assert 0.0 <= getattr(base, key) <= 1.0
    assert base.perplexity > 1
    zero = evaluate(lm, [(switch, 0.0)], PROMPTS, protocol)
    assert [t.text for t in zero.texts] == [t.text for t in base.texts]  # ε = 0 is the unsteered model, sample for sample
    assert zero.perplexity == pytest.approx(base.perplexity, rel=1e-9)
    assert zero.to_dict()["setting"] == {"s": 0.0} and "texts" not in zero.to_dict()
    assert zero.summary() == zero.to_dict() and json.loads(json.dumps(zero.to_dict())) == zero.to_dict()
    sweep = evaluate_sweep(lm, switch, [-20, 0, 20], PROMPTS, protocol)
    assert [ev.setting["s"] for ev in sweep] == [-20, 0, 20]
    assert [t.text for t in sweep[1].texts] == [t.text for t in base.texts]
    assert sweep[0].texts != sweep[2].texts
    done = []
    grid = evaluate_grid(lm, (switch, [0, 20]), (other, [-20, 0, 20]), PROMPTS, protocol, progress=lambda d, t: done.append((d, t)))
    assert [[ev.setting for ev in row] for row in grid] == [[{"s": a, "o": b} for b in (-20, 0, 20)] for a in (0, 20)]
    assert done[-1] == (6, 6)
    assert [t.text for t in grid[0][1].texts] == [t.text for t in base.texts]
    with pytest.raises(ValueError, match="no prompts to evaluate on"):
        evaluate(lm, [], [], protocol)
    with pytest.raises(ValueError, match=r"prompts must be a list of prompts; got one string: put it in a list, \[prompt\]"):
        evaluate(lm, [], "she was", protocol)  # (it ran on each of its characters)
    with pytest.raises(ValueError, match="the ε values for s must be a list of numbers, e.g. \\[-4, 0, 4\\]; got '10'"):
        evaluate_sweep(lm, switch, "10", PROMPTS, protocol)  # (it ran ε 1 and 0)
    for call in (lambda: evaluate_sweep(lm, switch, [1.0], "she was", protocol), lambda: evaluate_grid(lm, (switch, [1.0]), (other, [1.0]), "she was", protocol)):
        with pytest.raises(ValueError, match="got one string: put it in a list"):
            call()
    with pytest.raises(ValueError, match="samples must be an integer from 1"):
        evaluate(lm, [], PROMPTS, Protocol(samples=0))
    with pytest.raises(ValueError, match="give at least one ε value for s"):
        evaluate_sweep(lm, switch, [], PROMPTS, protocol)
    with pytest.raises(ValueError, match="finite"):
        evaluate(lm, [(switch, float("nan"))], PROMPTS, protocol)
    with pytest.raises(ValueError, match="both named 's'"):  # its cells are read by switch name: one would hide the other
        evaluate_grid(lm, (switch, [0, 20]), (switch, [0]), PROMPTS, protocol)

    fig = sweep_figure(sweep, "s", ("positive_share", "toxicity_prob"))
    assert [list(t.x) for t in fig.data] == [[-20, 0, 20]] * 3  # two metrics + perplexity
    assert not fig.layout.shapes
    shaded = sweep_figure(sweep, "s", ("positive_share",), fluent=(-3.0, 4.0))  # the card's fluent range, shaded
    (band,) = shaded.layout.shapes
    assert (band.x0, band.x1, band.xref, band.yref) == (-3.0, 4.0, "x", "y domain")
    assert shaded.layout.annotations[0].text == "fluent range"
    heat = grid_figure(grid, "s", "o", ("positive_share", "toxicity_prob"))
    assert len(heat.data) == 2 and list(heat.data[0].x) == [-20, 0, 20] and list(heat.data[0].y) == [0, 20]
    # each colour bar sits in the gap after its own map, clear of the next map; the shared y title only on the first
    ends = [heat.layout.xaxis.domain[1], heat.layout.xaxis2.domain[1]]
    assert [t.colorbar.x for t in heat.data] == pytest.approx([e + 0.01 for e in ends])
    assert heat.data[0].colorbar.x < heat.layout.xaxis2.domain[0] - 0.05
    assert heat.layout.yaxis.title.text == "ε of s" and heat.layout.yaxis2.title.text is None
    assert list(heat.layout.xaxis2.tickvals) == [-20, 0, 20] and list(heat.layout.yaxis2.tickvals) == [0, 20]
    with pytest.raises(ValueError, match="unknown metric"):
        sweep_figure(sweep, "s", ("nope",))


def test_cli_eval_sweep_and_grid(tmp_path, llama_lm, capsys):
    from lmswitch.cli import main

    folder = tmp_path / "tiny"
    llama_lm.model.save_pretrained(folder)
    llama_lm.tokenizer.save_pretrained(folder)
    from lmswitch import load_model

    lm = load_model(str(folder), dtype="float32")
    a, b = random_switch(lm, seed=1, scale=30.0, name="a"), random_switch(lm, seed=2, scale=30.0, name="b")
    a.save(tmp_path / "a.safetensors")
    b.save(tmp_path / "b.safetensors")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS), encoding="utf-8")
    common = ["eval", "--model", str(folder), "--dtype", "float32", "--prompts", str(prompts), "--samples", "2", "--max-new-tokens", "4"]
    assert main([*common, "--switch", str(tmp_path / "a.safetensors"), "--eps=-10,0,10", "--out", str(tmp_path / "out"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [row["setting"]["a"] for row in data["sweep"]] == [-10, 0, 10]
    assert (tmp_path / "out" / "sweep.html").is_file()
    saved = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert len(saved["texts"]) == 3 and len(saved["texts"][0]) == 6
    assert main([*common, "--switch", str(tmp_path / "a.safetensors"), "--eps", "0,10", "--grid", str(tmp_path / "b.safetensors"),
                 "--grid-eps=-10,10", "--json"]) == 0
    grid = json.loads(capsys.readouterr().out)["grid"]
    assert [[c["setting"] for c in row] for row in grid] == [[{"a": 0, "b": -10}, {"a": 0, "b": 10}], [{"a": 10, "b": -10}, {"a": 10, "b": 10}]]
    # bad input: exit code 2 with a readable message
    assert main([*common]) == 2
    assert "--switch" in capsys.readouterr().err
    assert main([*common, "--switch", str(tmp_path / "a.safetensors"), "--metrics", "bogus"]) == 2
    assert "unknown metric" in capsys.readouterr().err
    assert main([*common, "--switch", str(tmp_path / "a.safetensors"), "--samples", "0"]) == 2
    assert "samples" in capsys.readouterr().err


def _same_evaluation(a, b) -> None:
    assert [(t.prompt, t.text) for t in a.texts] == [(t.prompt, t.text) for t in b.texts]
    assert a.setting == b.setting and (a.prompts, a.samples) == (b.prompts, b.samples)
    x, y = a.summary(), b.summary()
    for key in x:
        if key not in ("setting", "seconds"):
            assert x[key] == pytest.approx(y[key], rel=1e-6, abs=1e-6), key  # a perplexity's float32 sums: ~2e-8 relative
    for s, t in zip(a.texts, b.texts, strict=True):
        for key in ("sentiment", "toxicity", "formality"):
            assert getattr(s, key) == pytest.approx(getattr(t, key), abs=1e-6)


def test_evaluate_settings_equals_separate_evaluations(llama_lm):
    """Sampling several settings in shared batches gives each setting exactly its own evaluation."""
    lm = llama_lm
    a = random_switch(lm, seed=4, scale=30.0, name="a")
    b = random_switch(lm, seed=5, scale=30.0, name="b")
    settings = [[(a, 15.0)], [], [(a, -10.0), (b, 20.0)]]
    protocol = Protocol(samples=2, max_new_tokens=6, batch_size=4)  # 18 rows in 5 batches, most mixing settings
    rows: list[tuple[int, int]] = []
    together = evaluate_settings(lm, settings, PROMPTS, protocol, progress=lambda d, t: rows.append((d, t)))
    assert rows == [(4, 18), (8, 18), (12, 18), (16, 18), (18, 18)]
    alone = [evaluate(lm, s, PROMPTS, protocol) for s in settings]
    assert [ev.setting for ev in together] == [{"a": 15.0}, {}, {"a": -10.0, "b": 20.0}]
    for x, y in zip(together, alone, strict=True):
        _same_evaluation(x, y)
    assert together[0].texts != together[2].texts  # the settings do differ
    (single,) = evaluate_settings(lm, [settings[2]], PROMPTS, protocol)
    _same_evaluation(single, alone[2])
    assert single.perplexity == alone[2].perplexity and single.texts == alone[2].texts  # one code path: exactly equal
    with pytest.raises(ValueError, match="at least one steering setting"):
        evaluate_settings(lm, [], PROMPTS, protocol)
    with pytest.raises(ValueError, match="finite"):
        evaluate_settings(lm, [[], [(a, float("inf"))]], PROMPTS, protocol)


def test_sweep_progress_counts_settings(llama_lm):
    switch = random_switch(llama_lm, seed=4, scale=30.0, name="s")
    done = []
    evaluate_sweep(llama_lm, switch, [-5, 0, 5], PROMPTS[:2], Protocol(samples=1, max_new_tokens=3, batch_size=3),
                   progress=lambda d, t: done.append((d, t)))
    assert done == [(1, 3), (3, 3)]  # 2 rows per setting, batches of 3 rows: the second batch completes settings 2 and 3


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_text_scores_perplexity_matches_token_changes(make_lm, family):
    lm = make_lm(family, seed=1, init=0.3)
    prompt = "the happy one"
    texts = ["was kind to all of them", "", "sad"]
    out = text_scores(lm, prompt, texts)
    assert all(isinstance(r, TextScores) for r in out)
    assert [set(r.to_dict()) for r in out] == [{"sentiment", "toxicity", "perplexity", "tokens"}] * 3
    for text, row in zip(texts, out, strict=True):
        assert row.sentiment == pytest.approx(sentiment_scores([text])[0])
        assert row.toxicity == pytest.approx(toxicity_scores([text])[0])
        if not text:
            assert row.perplexity is None and row.tokens == 0
            continue
        steps = token_changes(lm, [], text, prompt=prompt)
        logp = [t.logp_base for t in steps if t.scored]
        assert row.tokens == len(steps) == len(text.split()) == len(logp)  # after a prompt every token is scored
        assert row.perplexity == pytest.approx(math.exp(-sum(logp) / len(logp)), rel=1e-6)
    assert text_scores(lm, prompt, []) == []
    with pytest.raises(ValueError, match="not a string"):
        text_scores(lm, prompt, ["fine", 3])
    prompts = [prompt, "another prompt that is longer", prompt]  # one prompt per text: scored together, as one by one
    together = text_scores(lm, prompts, texts)
    for p, text, row in zip(prompts, texts, together, strict=True):
        alone = text_scores(lm, p, [text])[0]
        assert row.tokens == alone.tokens and row.sentiment == alone.sentiment
        assert row.perplexity == pytest.approx(alone.perplexity, rel=1e-5) if alone.perplexity else row.perplexity is None
    with pytest.raises(ValueError, match="2 prompts for 3 texts"):
        text_scores(lm, prompts[:2], texts)


def test_protocol_defaults_are_the_sampling_defaults():
    from lmswitch.core.options import SAMPLING

    assert (PROTOCOL.top_p, PROTOCOL.temperature) == (SAMPLING.top_p, SAMPLING.temperature)
    assert PROTOCOL.to_dict() == {"samples": 5, "max_new_tokens": 25, "top_p": 0.9, "temperature": 1.0, "seed": 0, "batch_size": 128,
                                  "adaptive": False, "kl_budget": None,
                                  "generation_budget": SAMPLING.generation_budget, "best_of": 1, "guide": 1,
                                  "repeat_guard": SAMPLING.repeat_guard, "score_from_decode": True}


def test_an_evaluation_decodes_with_every_option_of_its_protocol(llama_lm):
    """Guided decoding and best of n reach the evaluation's rows: its texts are the decode's with the same options (a
    protocol that dropped one would sample plain rows and still pass the shape checks above)."""
    s = judged_switch(llama_lm, seed=4, scale=30.0, name="s")
    for protocol in (Protocol(samples=2, max_new_tokens=12, guide=3), Protocol(samples=2, max_new_tokens=6, best_of=3)):
        ev = evaluate(llama_lm, [(s, 3.0)], PROMPTS, protocol)
        rows = [(p, protocol.seed + k) for p in PROMPTS for k in range(protocol.samples)]
        gen = generate_tokens(llama_lm, [p for p, _ in rows], [[(s, 3.0)]] * len(rows), [k for _, k in rows], protocol.sampling())
        assert [t.text for t in ev.texts] == gen.texts, protocol
        plain = generate_tokens(llama_lm, [p for p, _ in rows], [[(s, 3.0)]] * len(rows), [k for _, k in rows],
                                replace(protocol.sampling(), guide=1, best_of=1))
        assert gen.texts != plain.texts  # (the option changes the texts, so the equality above means something)
