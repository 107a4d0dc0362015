"""Training switches on tiny models: a planted signal is learned, training is
deterministic, reports progress, can be cancelled, and refuses bad inputs."""

from __future__ import annotations

import math
import pathlib
import random
import textwrap
import threading
from dataclasses import replace

import pytest
import torch
from conftest import FILLER, SCALED_FAMILIES, WORDS_A, WORDS_B, build_lm, random_switch
from tiny import sample_texts

from lmswitch import Switch, TrainingCancelled, steer, train_switch
from lmswitch.core.hidden import encode_texts
from lmswitch.core.options import TrainConfig
from lmswitch.core.train import NEAR_COPY_SHARE, DataAdvice, advise_on_data, shared_share
from lmswitch.io.resources import read_data_text
from lmswitch.lenses.svd import reference_hidden


@torch.no_grad()
def mean_log_likelihood(lm, texts: list[str], setting) -> float:
    """Mean per-token log-likelihood of equal-length texts under ``setting``."""
    ids = torch.tensor([lm.tokenizer(t, add_special_tokens=False).input_ids for t in texts])
    with steer(lm, setting):
        logits = lm.model(input_ids=ids).logits.float()
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return logp.mean().item()


@pytest.fixture(scope="module", params=["gpt2", "gpt_neox"])
def signal_lm(request, tokenizer):
    # a larger init scale than the default gives the random head enough reach for a
    # style switch to move held-out likelihood by clearly more than float noise
    return build_lm(request.param, init=0.3, tokenizer=tokenizer)


def _objective_on_four_texts(lm, config: TrainConfig):
    """The training objective over four texts, every token both trained on and held out: (objective, texts, data)."""
    from lmswitch.core.train import _Objective

    texts = sample_texts(random.Random(3), WORDS_A, 4)
    data = encode_texts(lm, texts, [1.0] * len(texts), 256)
    everything = torch.ones(len(data.targets), dtype=torch.bool)
    return _Objective(lm, data, (everything, everything), config, use_dummy=False), texts, data


@pytest.mark.parametrize("family", SCALED_FAMILIES)
def test_the_objective_of_a_family_that_scales_its_logits_after_the_head_is_its_steered_likelihood(tokenizer, family):
    """Granite and Cohere scale their head's output: the training objective at W is the steered model's own mean NLL,
    and such a family trains with Adam (the L-BFGS solver's fast path is for heads whose output is the logits)."""
    lm = build_lm(family, init=0.3, tokenizer=tokenizer)
    config = TrainConfig()
    objective, texts, _ = _objective_on_four_texts(lm, config)
    switch = random_switch(lm, seed=2, scale=20.0, eps0=config.eps0)
    for eps in (0.0, 1.0):
        with torch.no_grad():
            nll = float(objective.loss(objective.train, eps * switch.W, torch.zeros_like(switch.W)))
        assert nll == pytest.approx(-mean_log_likelihood(lm, texts, [(switch, eps)]), abs=1e-4)
    card = train_switch(lm, texts, sample_texts(random.Random(4), WORDS_B, 4), config=TrainConfig(steps=3)).card
    assert card["optimizer"] == "adam"


@pytest.mark.parametrize("family", ["llama", *SCALED_FAMILIES])
def test_the_constant_penalty_is_the_models_own_mean_squared_logit_change(tokenizer, family):
    """The fluency term is measured in the model's logits, after-head scale included: at the mean training context, the
    vocabulary-centred squared logit change at target ε."""
    lm = build_lm(family, init=0.3, tokenizer=tokenizer)
    config = TrainConfig(optimizer="adam", constant_penalty=1.0, target_eps=3.0)
    objective, _, data = _objective_on_four_texts(lm, config)
    W = random_switch(lm, seed=2, scale=20.0).W
    m = data.hidden.float().mean(0, keepdim=True)
    with torch.no_grad():
        change = lm.logits_from_hidden(m + config.target_eps * config.eps0 * m @ W.T) - lm.logits_from_hidden(m)
        penalty = float(objective.fluency(W, torch.Generator()))
    assert penalty == pytest.approx(float((change - change.mean()).pow(2).mean()), rel=1e-3)


@pytest.fixture(scope="module")
def small_lm(tokenizer):
    return build_lm("llama", tokenizer=tokenizer)


@pytest.fixture(scope="module")
def small_data():
    rng = random.Random(7)
    return sample_texts(rng, WORDS_A, 20, length=10), sample_texts(rng, WORDS_B, 20, length=10)


# --- a planted signal is learned -------------------------------------------------------------


@pytest.fixture(scope="module")
def planted(signal_lm):
    rng = random.Random(0)
    pos, neg = sample_texts(rng, WORDS_A, 60), sample_texts(rng, WORDS_B, 60)
    switch = train_switch(signal_lm, pos, neg, config=TrainConfig(seed=0, steps=200), name="style", positive_label="A", negative_label="B")
    return signal_lm, switch


@pytest.mark.parametrize("eps", [0.5, 1.0])  # ε 1 is the fitted (maximum-likelihood) strength
def test_planted_signal_moves_heldout_likelihood(planted, eps):
    lm, switch = planted
    heldout_pos = sample_texts(random.Random(1001), WORDS_A, 40)
    heldout_neg = sample_texts(random.Random(1002), WORDS_B, 40)
    pos = {e: mean_log_likelihood(lm, heldout_pos, [(switch, e)]) for e in (-eps, 0.0, eps)}
    neg = {e: mean_log_likelihood(lm, heldout_neg, [(switch, e)]) for e in (-eps, 0.0, eps)}
    # +eps moves toward the positive style, -eps away from it; negatives the other way round
    assert pos[eps] > pos[0.0] + 1e-3 > pos[-eps] + 2e-3, pos
    assert neg[-eps] > neg[0.0] + 1e-3 > neg[eps] + 2e-3, neg


def test_planted_signal_raises_probability_of_style_words(planted):
    lm, switch = planted
    ids = torch.tensor([lm.tokenizer(t).input_ids for t in sample_texts(random.Random(1003), FILLER, 10, p_style=0.0)])
    a_ids = lm.tokenizer.convert_tokens_to_ids(WORDS_A)
    b_ids = lm.tokenizer.convert_tokens_to_ids(WORDS_B)

    def mass(eps: float) -> tuple[float, float]:
        with torch.no_grad(), steer(lm, [(switch, eps)]):
            probs = lm.model(input_ids=ids).logits.softmax(-1)
        return probs[..., a_ids].sum(-1).mean().item(), probs[..., b_ids].sum(-1).mean().item()

    (a_minus, b_minus), (a0, b0), (a_plus, b_plus) = mass(-5.0), mass(0.0), mass(5.0)
    assert a_plus > a0 > a_minus
    assert b_plus < b0 < b_minus


def test_planted_card(planted):
    lm, switch = planted
    card = switch.card
    assert isinstance(switch, Switch) and switch.W.shape == (lm.hidden_size, lm.hidden_size)
    assert card["heldout_gain"] > 0
    assert card["heldout_nll_with_switch"] < card["heldout_nll_without_switch"] < card["heldout_nll_reversed_switch"]
    assert card["n_positive"] == 60 and card["n_negative"] == 60
    assert card["tokens_train"] + card["tokens_heldout"] == 120 * 11  # every next-token scored once
    assert card["tokens_heldout"] > 0
    assert card["dummy_steer"] is True
    assert len(card["train_losses"]) == card["steps"] <= 200
    assert switch.model_fingerprint == lm.fingerprint and switch.model_name == lm.name
    assert (switch.name, switch.positive_label, switch.negative_label) == ("style", "A", "B")


# --- determinism ------------------------------------------------------------------------------


def test_same_seed_same_switch_other_seed_other_switch(small_lm, small_data):
    pos, neg = small_data
    a = train_switch(small_lm, pos, neg, config=TrainConfig(seed=0, steps=25))
    b = train_switch(small_lm, pos, neg, config=TrainConfig(seed=0, steps=25))
    c = train_switch(small_lm, pos, neg, config=TrainConfig(seed=1, steps=25))
    assert torch.equal(a.W, b.W)
    assert a.card["train_losses"] == b.card["train_losses"]
    assert not torch.allclose(a.W, c.W)


# --- progress and cancellation ----------------------------------------------------------------


def test_progress_callback_reports_every_step(small_lm, small_data):
    pos, neg = small_data
    calls: list[tuple] = []
    switch = train_switch(small_lm, pos, neg, config=TrainConfig(optimizer="adam", seed=0, steps=15), progress=lambda *args: calls.append(args))
    assert [c[0] for c in calls] == list(range(1, 16))
    assert all(c[1] == 15 for c in calls)
    assert all(isinstance(c[2], float) and math.isfinite(c[2]) and c[2] > 0 for c in calls)
    assert [round(c[2], 5) for c in calls] == switch.card["train_losses"]


def test_cancel_from_inside_the_callback(small_lm, small_data):
    pos, neg = small_data
    cancel = threading.Event()
    seen: list[int] = []

    def progress(step, total, loss):
        seen.append(step)
        if step == 3:
            cancel.set()

    with pytest.raises(TrainingCancelled, match="step 3 of 50"):
        train_switch(small_lm, pos, neg, config=TrainConfig(optimizer="adam", steps=50), progress=progress, cancel=cancel)
    assert seen == [1, 2, 3]


def test_cancel_with_a_callable_and_before_the_first_step(small_lm, small_data):
    pos, neg = small_data
    with pytest.raises(TrainingCancelled, match="step 0"):
        train_switch(small_lm, pos, neg, config=TrainConfig(steps=10), cancel=lambda: True)
    done = threading.Event()
    done.set()
    with pytest.raises(TrainingCancelled):
        train_switch(small_lm, pos, neg, config=TrainConfig(steps=10), cancel=done)


# --- bad inputs -------------------------------------------------------------------------------


ARTICLE = read_data_text("stance/four_day_week/article_a.txt")
GOOD = ["the happy and good one", "a warm kind smile for all"]
POS = [*GOOD, "the bright sweet joy of a kind and happy day", "love and joy for the good and warm",
       "a great smile and a sweet warm love"]
BAD = ["the sad one", "the bad one", "the cold one", "a cruel and bitter frown", "the dark grief of an awful day",
       "hate and grief for the bad and cold", "a bitter frown and a cruel dark hate"]


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (([],), {}, "no positive texts"),
        ((None, GOOD), {}, "no positive texts"),
        (([], GOOD), {}, "no positive texts"),
        ((["   \t\n"],), {}, "positive text #1 is empty or whitespace"),
        ((GOOD, ["the sad one", ""]), {}, "negative text #2 is empty"),
        (([*POS, "happy"],), {}, r"the positive text #6 \('happy'\) has 1 token\(s\).*remove it, or join it"),
        ((POS, ["the sad one", "the cruel one", "sad"]), {}, r"the negative text #3 \('sad'\) has 1 token"),  # by side
        ((POS, ["the sad one", "The  sad one", "sad"]), {}, r"the negative text #3 \('sad'\)"),  # counted as given, repeats too
        (("the happy and good one",), {}, r"the document has 5 tokens; a switch needs at least 32 tokens.*much better$"),
        ((POS, "the sad one"), {}, r"the negative side is one text of 3 tokens;.*or give two or more example sentences a side"),
        ((POS, ["the sad one"]), {}, r"the negative side is one text of 3 tokens;"),  # a list of one sentence, not a document
        ((GOOD, ["the sad one", "the cruel one"]), {"labels": [0.0] * 4}, "every label is 0"),
        ((pathlib.Path(__file__),), {}, r"the name of a file .* read it first"),
        ((__file__,), {}, r"the positive side is the name of a file"),
        ((GOOD, b"the sad one"), {}, "the negative side is bytes: decode it first"),
        ((GOOD, 42), {}, "a document \\(a string\\) or a list of texts; got int"),
        ((GOOD,), {"config": {"steps": 10}}, "config must be a TrainConfig"),
        ((POS, [" ".join(p.upper().split()) for p in reversed(POS)]), {}, "identical"),
        ((ARTICLE, "Title\n" + textwrap.fill(ARTICLE, 50)), {}, r"nearly one text \(100% of the shorter"),  # a PDF and a Word save
        ((ARTICLE, ARTICLE[: len(ARTICLE) // 2]), {}, "nearly one text"),  # an article and a part of it
        ((["the good", 42],), {}, "not a string"),
        ((["the good\x00one"],), {}, "NUL"),
        ((GOOD,), {"config": TrainConfig(steps=0)}, "steps must be an integer"),
        ((GOOD,), {"config": TrainConfig(steps=10**9)}, "steps must be an integer"),
        ((GOOD,), {"config": TrainConfig(steps=2.5)}, "steps must be an integer"),
        ((GOOD, ["the sad one"]), {"labels": [1.0, 1.0]}, "2 labels for 3 texts"),
        ((GOOD,), {"labels": [1.0, 1.5]}, r"labels must be finite numbers in \[-1, 1\]"),
        ((GOOD,), {"labels": [-2.0, 1.0]}, r"\[-1, 1\]"),
        ((GOOD,), {"labels": [float("nan"), 1.0]}, r"\[-1, 1\]"),
        ((GOOD,), {"config": TrainConfig(lr=0.0)}, "lr"),
        ((GOOD,), {"config": TrainConfig(eps0=float("inf"))}, "eps0"),
        ((GOOD,), {"config": TrainConfig(heldout=0.7)}, "heldout"),
        ((GOOD,), {"config": TrainConfig(batch_tokens=4)}, "batch_tokens"),
    ],
)
def test_bad_inputs_are_refused_with_a_clear_message(small_lm, args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        train_switch(small_lm, *args, **kwargs)


@pytest.mark.parametrize("topic", ["four_day_week", "homework_limits", "night_trains", "school_phones", "tourist_tax", "wind_farm"])
def test_two_opposing_articles_on_one_topic_are_far_from_one_text(topic):
    """The near-copy refusal leaves real A-vs-B data alone: the stance data's opposing articles share at most 18%."""
    a, b = (read_data_text(f"stance/{topic}/article_{side}.txt") for side in "ab")
    assert shared_share([a], [b]) < NEAR_COPY_SHARE / 4
    words = a.split()  # an article against a copy with one word in 80 changed (a rewrite of its stance) is two texts
    edited = " ".join("not" if i % 80 == 40 else w for i, w in enumerate(words))
    assert 0.8 < shared_share([a], [edited]) < NEAR_COPY_SHARE


# --- other input shapes -----------------------------------------------------------------------


def test_single_document(small_lm):
    rng = random.Random(3)
    words = sample_texts(rng, WORDS_A, 1, length=300)[0]
    switch = train_switch(small_lm, words, config=TrainConfig(steps=20), name="doc")
    card = switch.card
    assert switch.W.shape == (small_lm.hidden_size, small_lm.hidden_size)
    assert torch.isfinite(switch.W).all()
    assert card["n_positive"] == 1 and card["n_negative"] == 0
    assert card["dummy_steer"] is False
    # the document is longer than the context: every next token is still scored exactly once
    assert card["tokens_train"] + card["tokens_heldout"] == 299
    assert card["tokens_heldout"] > 0 and math.isfinite(card["heldout_gain"])
    assert card["steps"] == len(card["train_losses"]) <= 20 and card["optimizer"] == "lbfgs-sampled"
    assert switch.model_fingerprint == small_lm.fingerprint and switch.name == "doc"


def test_done_gives_the_documents_read_but_not_sentences_or_own_continuations(small_lm, small_data, monkeypatch):
    from lmswitch.core import train as train_module
    from lmswitch.core.train import Done, train_events

    rng = random.Random(4)
    doc_a, doc_b = sample_texts(rng, WORDS_A, 1, length=80)[0], sample_texts(rng, WORDS_B, 1, length=80)[0]

    def documents(*sides, **config):
        done = next(e for e in train_events(small_lm, *sides, config=TrainConfig(steps=3, **config)) if isinstance(e, Done))
        return [d.text for d in done.documents]

    assert documents(doc_a) == [doc_a]
    assert documents(doc_a, doc_b) == [doc_a, doc_b]
    assert documents(doc_a, small_data[1]) == [doc_a]  # a document against sentences
    assert documents(*small_data) == []
    assert documents(doc_a, self_contrast=True) == [doc_a]  # the model's own continuations are not among them
    monkeypatch.setattr(train_module, "READ_CHARS", len(doc_a) - 1)  # longer than a lens reads: not kept
    assert documents(doc_a) == []


def test_a_switch_is_named_by_its_data_unless_its_caller_names_it(small_lm, small_data):
    rng = random.Random(4)
    doc_a, doc_b = sample_texts(rng, WORDS_A, 1, length=80)[0], sample_texts(rng, WORDS_B, 1, length=80)[0]

    def named(*sides, **kw):
        s = train_switch(small_lm, *sides, config=TrainConfig(steps=3), **kw)
        return s.positive_label, s.negative_label, s.description

    assert named(doc_a) == ("like the document", "unlike the document", "learned from one document")
    assert named(doc_a, doc_b) == ("document A", "document B", "document A (+) vs document B (−)")
    assert named(doc_a, doc_b, positive_label="pro-tax", negative_label="no tax")[2] == "pro-tax (+) vs no tax (−)"  # its labels
    assert named(*small_data) == named(doc_a, small_data[1]) == ("positive", "negative", "learned from labelled examples")  # lists,
    # or a document against them (an empty description left `info` printing "name: ")
    assert named(doc_a, positive_label="kind", description="") == ("kind", "unlike the document", "")  # each given one kept
    assert named(doc_a, positive_label=" ", negative_label="") == named(doc_a)  # a blank label names no direction: not given


def test_a_bad_callback_or_name_is_refused_before_any_work(small_lm, small_data, monkeypatch):
    """progress and cancel failed after the texts were read ("'int' object is not callable"), and a name the app and the
    command line cannot refer to ("my switch/1") was trained, saved and loaded back."""
    from lmswitch.core import train as module

    monkeypatch.setattr(module, "_prepare", lambda *a: pytest.fail("the data was read before the refusal"))
    cases = {"progress must be a function of \\(step, total, loss\\); got int": {"progress": 5},
             "cancel must be a threading.Event or a function that returns True to stop; got str": {"cancel": "yes"},
             "switch names are 1–48 characters .* got 'my switch/1'": {"name": "my switch/1"}}
    for said, kw in cases.items():
        with pytest.raises(ValueError, match=said):
            train_switch(small_lm, *small_data, **kw)


def test_graded_labels(small_lm, small_data):
    pos, neg = small_data
    labels = [1.0] * 10 + [0.5] * 10 + [-0.5] * 10 + [-1.0] * 10
    switch = train_switch(small_lm, pos, neg, labels=labels, config=TrainConfig(steps=10))
    assert switch.card["graded_labels"] is True
    assert torch.isfinite(switch.W).all()
    as_signs = train_switch(small_lm, pos, neg, config=TrainConfig(steps=10))
    assert not torch.allclose(switch.W, as_signs.W)  # the grades are read, not only their signs


def test_a_graded_label_steers_its_text_at_that_fraction_of_eps(tokenizer):
    """The objective with labels y: each text's NLL under the model steered at ε = y (in ε0 units), averaged."""
    from lmswitch.core.train import _Objective

    lm = build_lm("llama", init=0.3, tokenizer=tokenizer)
    config = TrainConfig()
    texts, labels = sample_texts(random.Random(3), WORDS_A, 4), [1.0, 0.5, -0.5, -1.0]  # (equal lengths)
    data = encode_texts(lm, texts, labels, 256)
    everything = torch.ones(len(data.targets), dtype=torch.bool)
    objective = _Objective(lm, data, (everything, everything), config, use_dummy=False)
    switch = random_switch(lm, seed=2, scale=20.0, eps0=config.eps0)
    with torch.no_grad():
        nll = float(objective.loss(objective.train, switch.W, torch.zeros_like(switch.W)))
    expected = sum(-mean_log_likelihood(lm, [t], [(switch, y)]) for t, y in zip(texts, labels, strict=True)) / len(texts)
    assert nll == pytest.approx(expected, abs=1e-4)
    assert nll != pytest.approx(-mean_log_likelihood(lm, texts, [(switch, 1.0)]), abs=1e-3)  # (not all at ε 1)


def test_positives_only_without_heldout(small_lm, small_data):
    pos, _ = small_data
    switch = train_switch(small_lm, pos, config=TrainConfig(steps=10, heldout=0))
    assert switch.card["tokens_heldout"] == 0
    assert switch.card["heldout_gain"] is None
    assert switch.card["tokens_train"] == 20 * 9


# --- data advice ------------------------------------------------------------------------------


def card(**kw) -> dict:
    base = {
        "tokens_train": 2000,
        "tokens_heldout": 400,
        "heldout_gain": 0.05,
        "heldout_nll_with_switch": 3.2,
        "heldout_nll_reversed_switch": 3.4,
        "n_positive": 40,
        "n_negative": 40,
        "stopped_early": False,
        "steps": 200,
    }
    return {**base, **kw}


@pytest.mark.parametrize(
    ("kw", "expect"),
    [
        (dict(tokens_heldout=0, heldout_gain=None), ["No held-out split", "2,000 training tokens", "held-out fraction"]),
        (dict(tokens_train=120, heldout_gain=-0.2), ["Very little text", "120 training tokens", "-0.200 nats/token", "Add more examples"]),
        (dict(tokens_train=120, tokens_heldout=0, heldout_gain=None), ["Very little text", "120 training tokens"]),
        # what more to give follows the data: one document (with or without its self-contrast negatives), or two
        (dict(tokens_train=256, n_positive=1, n_negative=0, negatives="none"), ["Very little text", "a longer document"]),
        (dict(tokens_train=256, n_positive=1, n_negative=12, negatives="self-contrast"), ["a longer document"]),
        (dict(tokens_train=256, n_positive=1, n_negative=1, negatives="given"), ["longer documents (a few thousand tokens each)"]),
        # two documents with self-contrast text as a neutral middle: the card's data says what it was trained on
        (dict(tokens_train=256, n_positive=1, n_negative=13, negatives="self-contrast", data_shape="two documents"),
         ["longer documents (a few thousand tokens each)"]),
        (dict(tokens_train=256, n_positive=1, n_negative=13, negatives="self-contrast", data_shape="examples"), ["Add more examples"]),
        (
            dict(heldout_gain=-0.0421, heldout_nll_reversed_switch=3.2),  # reversing changes nothing: memorised
            [
                "-0.042 nats/token",
                "memorised",
                "2,000 training tokens",
                "more varied text",
                "fewer steps or a lower learning rate",
                "generation may still move",
            ],
        ),
        (dict(heldout_gain=0.0, stopped_early=True, heldout_nll_reversed_switch=3.1), ["+0.000 nats/token", "memorised", "a lower learning rate"]),
        (dict(heldout_gain=-0.273, optimizer="lbfgs", heldout_nll_reversed_switch=3.1),
         ["-0.273 nats/token", "no better than the model", "Add more examples", "guided decoding with 8", "30 + 30 sentiment"]),
        (dict(heldout_gain=-0.273, optimizer="lbfgs", heldout_nll_reversed_switch=3.1, n_positive=1, n_negative=1, negatives="given",
              data_shape="two documents"), ["Train on longer documents", "guided decoding with 8"]),  # no sentence example
        (dict(heldout_gain=-0.1, optimizer="lbfgs", n_negative=0), ["no better than the model", "self-contrast negatives"]),
        # the default recipe on the first-release sentiment data: W adds nothing beyond the dummy, but points the right way
        (dict(heldout_gain=-0.0367, optimizer="lbfgs-sampled", tokens_train=11867, heldout_nll_with_switch=4.1995,
              heldout_nll_reversed_switch=4.4042), ["-0.037 nats/token", "points the right way", "0.205 nats/token worse",
                                                    "11,867 training tokens", "fluent range"]),
        (dict(heldout_gain=0.004), ["Small held-out gain +0.004 nats/token", "400 held-out tokens", "More varied text"]),
        (dict(heldout_gain=0.0786), ["Enough data", "+0.079 nats/token", "400 held-out tokens", "2,000 training tokens"]),
        # a text in a language the model reads poorly: its gain was "Enough data … explains text it never saw" beside the
        # caution that the switch "may learn little beyond the language itself"
        (dict(heldout_gain=0.129, warnings=["The text is probably in a language the model handles poorly, so the switch may "
                                            "learn little beyond the language itself."]),
         ["+0.129 nats/token", "the text's language rather than its style", "may learn little beyond the language"]),
    ],
)
def test_data_advice_branches(kw, expect):
    text = advise_on_data(card(**kw)).text
    for part in expect:
        assert part in text, (part, text)
    # weak: the branches that say the switch may not generalise (the app announced them "✔ … is ready")
    weak = any(w in text for w in ("Very little text", "memorised"))
    no_gain = "explains held-out text no better than the model" in text  # not weak, but no plain ✔ in the app's headline
    assert advise_on_data(card(**kw)) == DataAdvice(text, weak, no_gain)
    assert "sentiment sentences" not in text or kw.get("data_shape", "examples") == "examples"
    assert "Enough data" not in text or not kw.get("warnings")
    assert 1 <= text.count(". ") + 1 <= 2 and text.endswith(".")


def test_repeated_texts_are_read_once_so_no_held_out_text_is_a_copy_of_a_training_one(small_lm, small_data):
    """One sentence given 40 times a side scored a held-out gain of +0.48, "Enough data": its held-out copies were
    training text. A repeat (spacing and case ignored) is read once, and the card and the advice say how many."""
    pos, neg = small_data
    config = TrainConfig(steps=3)
    repeated = train_switch(small_lm, pos + pos[:5] + [f"  {pos[0].upper()} "], neg, config=config)
    assert torch.equal(repeated.W, train_switch(small_lm, pos, neg, config=config).W)  # as if given once
    assert repeated.card.training.n_positive == len(pos) and repeated.card["repeated_texts"] == 6
    assert advise_on_data(repeated.card).text.endswith(" 6 repeated texts were read once.")
    with pytest.raises(ValueError, match=r"one text of \d+ tokens.*\(78 repeated texts were read once\)$"):
        train_switch(small_lm, [pos[0]] * 40, [neg[0]] * 40)


def test_data_advice_on_odd_cards(planted):
    assert "no training record" in advise_on_data({}).text
    assert "fewer steps" not in advise_on_data(card(heldout_gain=-0.1, stopped_early=True)).text
    with pytest.raises(ValueError, match="card"):
        advise_on_data(None)
    _, switch = planted
    assert "Enough data" in advise_on_data(switch.card).text  # a real card: the planted style is learned


# --- typed progress events ---------------------------------------------------------------------


def test_train_events_are_typed_and_end_with_the_same_switch_as_train_switch(small_lm):
    from lmswitch.core.train import Done, Encoded, Evaluated, Step, train_events

    pos, neg = POS, BAD
    config = TrainConfig(seed=0, steps=12, eval_every=3)
    events = list(train_events(small_lm, pos, neg, config=config))
    assert isinstance(events[0], Encoded) and events[0].tokens_train > 0
    assert isinstance(events[-1], Done)
    steps = [e for e in events if isinstance(e, Step)]
    assert [e.step for e in steps] == list(range(1, len(steps) + 1)) and all(e.total == 12 for e in steps)
    assert all(isinstance(e, Evaluated) for e in events[1:-1] if not isinstance(e, Step))
    direct = train_switch(small_lm, pos, neg, config=config)
    assert torch.equal(events[-1].switch.W, direct.W)
    assert events[-1].switch.card["train_losses"] == [round(e.loss, 5) for e in steps]


def test_closing_the_event_iterator_stops_training(small_lm):
    from lmswitch.core.train import Step, train_events

    events = train_events(small_lm, POS, BAD, config=TrainConfig(optimizer="adam", steps=500))
    seen = [e for _, e in zip(range(5), events, strict=False)]
    events.close()
    assert isinstance(seen[-1], Step) and seen[-1].step == 4
    with pytest.raises(StopIteration):
        next(events)


# --- the fluency terms ----------------------------------------------------------------------------


def _logit_change(lm, switch, C: torch.Tensor, eps: float) -> torch.Tensor:
    """Vocabulary-centred logit change of ``switch`` at ``eps`` for head inputs ``C`` (n, d)."""
    E = lm.head_weight(torch.float32)
    change = (eps * switch.eps0 * (C @ switch.W.float().T)) @ E.T
    return change - change.mean(-1, keepdim=True)


@pytest.fixture(scope="module")
def fluency_runs(signal_lm):
    rng = random.Random(3)
    pos, neg = sample_texts(rng, WORDS_A, 40), sample_texts(rng, WORDS_B, 40)
    base = TrainConfig(optimizer="adam", seed=0, steps=120)
    runs = {name: train_switch(signal_lm, pos, neg, config=replace(base, **kw)) for name, kw in
            {"plain": {}, "constant": {"constant_penalty": 50.0}, "kl": {"neutral_kl": 20.0}}.items()}
    contexts = encode_texts(signal_lm, pos + neg, [1.0] * len(pos + neg), 512, 32).hidden
    return signal_lm, runs, contexts


def test_constant_penalty_shrinks_the_context_independent_part(fluency_runs):
    lm, runs, C = fluency_runs

    def constant_share(switch) -> float:
        change = _logit_change(lm, switch, C, 8.0)
        return float(change.mean(0).pow(2).sum() / change.pow(2).sum(-1).mean())

    plain, penalised = constant_share(runs["plain"]), constant_share(runs["constant"])
    assert penalised < 0.5 * plain, (plain, penalised)
    assert runs["constant"].card["objective"] == {"neutral_kl": 0.0, "constant_penalty": 50.0, "target_eps": 8.0}
    assert "objective" not in runs["plain"].card  # the paper's objective alone records nothing extra


def test_neutral_kl_keeps_neutral_text_closer_to_the_model(fluency_runs):
    lm, runs, _ = fluency_runs
    C = reference_hidden(lm)
    base = torch.log_softmax(lm.raw_logits(C, dtype=torch.float32), -1)

    def neutral_kl(switch) -> float:
        steered = torch.log_softmax(lm.raw_logits(C, dtype=torch.float32) + _logit_change(lm, switch, C, 8.0), -1)
        return float((base.exp() * (base - steered)).sum(-1).mean())

    assert neutral_kl(runs["kl"]) < 0.7 * neutral_kl(runs["plain"])
    assert runs["kl"].card.training.heldout_gain > 0  # it still learns the style


@pytest.mark.parametrize("kw, match", [({"neutral_kl": -1.0}, "neutral_kl"), ({"constant_penalty": float("nan")}, "constant_penalty"),
                                       ({"target_eps": 0.0}, "target_eps")])
def test_bad_fluency_settings(small_lm, kw, match):
    with pytest.raises(ValueError, match=match):
        train_switch(small_lm, GOOD, config=TrainConfig(steps=5, **kw))


def test_the_held_out_loss_in_row_chunks_is_the_loss_of_all_rows_at_once():
    """Held-out losses run without a backward, a few rows at a time: the same rows and the same mean, so the same
    number (the ridge path compares them and the card stores them)."""
    from lmswitch.core.train import _SteeredNLL

    g = torch.Generator().manual_seed(3)
    U, E = torch.randn(37, 16, generator=g), torch.randn(50, 16, generator=g)
    L0, Y = torch.randn(37, 50, generator=g), torch.randint(0, 50, (37,), generator=g)
    whole = _SteeredNLL.apply(U, E, L0, Y)
    for chunk in (1, 8, 37, 64):
        assert torch.equal(_SteeredNLL.value(U, E, L0, Y, chunk=chunk), whole)
