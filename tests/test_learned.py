"""What a switch learned: planted words, planted spans and planted stances are read back; a trained switch tells A from B."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import EXAMPLES, WORDS_A, WORDS_B, all_threads, lines, random_switch

import lmswitch as ls
from lmswitch.lenses.learned import Learned, what_was_learned
from lmswitch.lenses.svd import reference_hidden

# documents of the tiny vocabulary: A is warm, B is cold, both about the same "topic" (the filler words)
DOC_A = " ".join(f"the {a} one was {b} and it was {a}" for a, b in zip(WORDS_A, WORDS_A[3:] + WORDS_A[:3], strict=True))
DOC_B = " ".join(f"the {a} one was {b} and it was {a}" for a, b in zip(WORDS_B, WORDS_B[3:] + WORDS_B[:3], strict=True))
MORE_A = " ".join(f"we had a {a} time with the {b} one" for a, b in zip(WORDS_A[::-1], WORDS_A, strict=True))


def unit_row(lm, word: str) -> torch.Tensor:
    E = lm.head.weight.detach().float()
    u = E[lm.tokenizer.convert_tokens_to_ids(word)]
    return u / u.norm()


def planted(lm, up: list[str], down: list[str], scale: float, context: torch.Tensor, **kwargs) -> ls.Switch:
    """W = scale · (Σ_up u_w − Σ_down u_w) vᵀ: the words' output embeddings on the word side, the mean ``context`` on the other."""
    u = sum((unit_row(lm, w) for w in up), torch.zeros(lm.hidden_size)) - sum((unit_row(lm, w) for w in down), torch.zeros(lm.hidden_size))
    v = context.mean(0)
    W = scale * torch.outer(u, v / v.norm())
    return ls.Switch(W=W, model_name=lm.name, model_fingerprint=lm.fingerprint, **kwargs)


def contexts(lm, text: str) -> torch.Tensor:
    return reference_hidden(lm, [text])


def test_a_planted_word_is_promoted_and_a_planted_opposite_demoted(gpt2_lm):
    switch = planted(gpt2_lm, ["grief"], ["joy"], 500.0, reference_hidden(gpt2_lm), name="grief")
    learned = what_was_learned(gpt2_lm, switch, None, words=5)
    assert learned.promoted[0] == "grief" and learned.demoted[0] == "joy"
    assert len(learned.promoted) == len(learned.demoted) == 5
    # labelled sentences: the words only
    assert (learned.text, learned.spans, learned.own_meter, learned.other_meter, learned.verdict) == ("", [], None, None, "")
    md = learned.to_markdown()
    assert "**Promotes**" in md and "grief" in md and "joy" in md and "meter" not in md and "passages" not in md
    assert json.loads(json.dumps(learned.to_dict()))["promoted"][0] == "grief"  # a plain dict, as the other results give


def test_a_training_warning_is_shown_above_what_was_learned(gpt2_lm):
    """A text in a language the model reads poorly: its word lists read as noise, and the Train tab showed them without
    the report's caution beside them."""
    warning = "The text is probably in a language or script that 'gpt2' handles poorly."
    switch = planted(gpt2_lm, ["grief"], ["joy"], 500.0, reference_hidden(gpt2_lm), name="grief", card={"warnings": [warning]})
    learned = what_was_learned(gpt2_lm, switch, None, words=5)
    assert learned.cautions == (warning,)
    first, second = learned.to_markdown().split("\n\n")[:2]
    assert first.startswith("⚠ *The text is probably in a language") and first.endswith("Read what follows with that in mind.*")
    assert second.startswith("**Promotes**")
    plain = planted(gpt2_lm, ["grief"], ["joy"], 500.0, reference_hidden(gpt2_lm), name="grief")
    assert what_was_learned(gpt2_lm, plain, None, words=5).to_markdown().startswith("**Promotes**")


def test_the_documents_planted_style_word_is_its_top_span(gpt2_lm):
    doc = "the one was at the sea and the cruel one was there with all of them"
    switch = planted(gpt2_lm, ["cruel"], [], 2000.0, contexts(gpt2_lm, doc), name="cruel")
    learned = what_was_learned(gpt2_lm, switch, doc, spans=2)
    assert learned.text == doc and not learned.truncated
    assert "cruel" in learned.spans[0].text
    assert learned.spans[0].score >= learned.spans[-1].score > 0  # strongest first, only spans that favour the positive side
    span = learned.spans[0]
    assert doc[span.start : span.end] == span.text
    assert "<b>" in learned.to_markdown() and "cruel" in learned.to_markdown().split("<b>")[1].split("</b>")[0]


def test_a_planted_stance_reads_the_other_document_as_the_opposite_side(gpt2_lm):
    switch = planted(gpt2_lm, WORDS_A, WORDS_B, 300.0, contexts(gpt2_lm, DOC_A + " " + DOC_B), name="mood",
                     positive_label="warm", negative_label="cold")
    learned = what_was_learned(gpt2_lm, switch, DOC_A, DOC_B)
    assert learned.own_meter > 0 > learned.other_meter
    first, second = learned.verdict.splitlines()
    assert first.startswith("✓ Document A measures ε +") and "*warm*" in first
    assert second.startswith("✓ Document B measures ε −") and "opposite side (*cold*)" in second
    md = learned.to_markdown()
    assert "**Style meter**" in md and "- ✓ Document B" in md


def test_a_switch_that_reads_both_documents_alike_learned_the_topic(gpt2_lm):
    switch = planted(gpt2_lm, WORDS_A, WORDS_B, 300.0, contexts(gpt2_lm, DOC_A + " " + DOC_B), name="mood")
    learned = what_was_learned(gpt2_lm, switch, DOC_A, MORE_A)  # "B" is on the same side as A
    assert learned.own_meter > 0 and learned.other_meter > 0
    assert learned.verdict.splitlines()[1].startswith("✗ Document B measures ε +")
    assert "does not tell B from A; it may have learned the topic, not the stance" in learned.verdict


def test_one_document_is_measured_itself(gpt2_lm):
    switch = planted(gpt2_lm, WORDS_A, WORDS_B, 300.0, contexts(gpt2_lm, DOC_A), name="mood")
    learned = what_was_learned(gpt2_lm, switch, DOC_A)
    assert learned.own_meter > 0 and learned.other_meter is None
    assert learned.verdict.startswith("✓ The document measures ε +") and "\n" not in learned.verdict
    backwards = what_was_learned(gpt2_lm, -switch, DOC_A)  # the negated switch reads its "own" document as the other side
    assert backwards.own_meter < 0 and backwards.verdict.startswith("✗ The document measures ε −")
    assert "learned little" in backwards.verdict


def test_documents_the_training_read_are_not_read_again(llama_lm, monkeypatch):
    """The training's body pass gives its documents whole (``Done.documents``): the lenses read them from there, and a
    document cut at max_chars, or not among them, is read by a pass of its own."""
    from lmswitch.core.train import Done, train_events
    from lmswitch.lenses import learned as learned_module

    config = ls.TrainConfig(optimizer="adam", steps=5, lr=5e-2, eps0=1e-2, heldout=0.0)
    done = next(e for e in train_events(llama_lm, DOC_A, DOC_B, config=config) if isinstance(e, Done))
    assert [d.text for d in done.documents] == [DOC_A, DOC_B]
    fresh = what_was_learned(llama_lm, done.switch, DOC_A, DOC_B)
    passes = []
    encode_text = learned_module.encode_text
    monkeypatch.setattr(learned_module, "encode_text", lambda lm, text: passes.append(text) or encode_text(lm, text))
    reused = what_was_learned(llama_lm, done.switch, DOC_A, DOC_B, read=done.documents)
    assert passes == []
    assert reused.own_meter == pytest.approx(fresh.own_meter, abs=1e-3) and reused.other_meter == pytest.approx(fresh.other_meter, abs=1e-3)
    assert [(s.start, s.end) for s in reused.spans] == [(s.start, s.end) for s in fresh.spans]
    what_was_learned(llama_lm, done.switch, DOC_A, MORE_A, read=done.documents, max_chars=len(DOC_A))
    assert passes == [MORE_A]  # A (whole within max_chars) from the training; MORE_A was never trained on
    what_was_learned(llama_lm, done.switch, DOC_A, read=done.documents, max_chars=len(DOC_A) - 20)
    assert len(passes) == 2 and passes[1] != DOC_A and DOC_A.startswith(passes[1])  # cut: only what is shown is read


def test_a_switch_trained_on_a_against_b_reads_b_as_negative(llama_lm):
    config = ls.TrainConfig(optimizer="adam", steps=40, lr=5e-2, eps0=1e-2, heldout=0.0)  # a clear effect on a near-uniform tiny model
    switch = ls.train_switch(llama_lm, DOC_A, DOC_B, name="trained", config=config)
    learned = what_was_learned(llama_lm, switch, DOC_A, DOC_B)
    assert learned.own_meter > 0 > learned.other_meter
    assert all(line.startswith("✓") for line in learned.verdict.splitlines())
    top_up, top_down = set(learned.promoted[:5]), set(learned.demoted[:5])
    assert len(top_up & set(WORDS_A)) >= 3 and not top_up & set(WORDS_B)
    assert len(top_down & set(WORDS_B)) >= 3 and not top_down & set(WORDS_A)


def test_long_documents_are_read_up_to_max_chars_at_a_word_boundary(gpt2_lm):
    switch = random_switch(gpt2_lm, seed=1, scale=30.0)
    long = DOC_A + " " + DOC_B
    learned = what_was_learned(gpt2_lm, switch, long, DOC_B, max_chars=100, spans=1)
    assert learned.truncated and len(learned.text) <= 100 and long.startswith(learned.text)
    assert long[len(learned.text)] == " "  # cut between words
    assert "read up to its first 100 characters" in learned.to_markdown()
    assert not what_was_learned(gpt2_lm, switch, DOC_A[:80], max_chars=100, spans=1).truncated
    only_b = what_was_learned(gpt2_lm, switch, DOC_A[:80], long, max_chars=100, spans=1)  # the other document is cut too
    assert only_b.truncated and only_b.text == DOC_A[:80]


def test_document_text_cannot_inject_markdown(gpt2_lm):
    switch = random_switch(gpt2_lm, seed=2, scale=30.0, positive_label="**loud**")
    doc = "the # one <script>x</script> was * kind _ and [it](http://x) was"
    md = what_was_learned(gpt2_lm, switch, doc, spans=3).to_markdown()
    assert "<script>" not in md and "[it](" not in md and "\\*\\*loud\\*\\*" in md


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (("   ",), {}, "empty"),
        (("the one", 5), {}, "int, not a string"),
        (("the one",), dict(words=0), "words"),
        (("the one",), dict(spans=0), "n_spans"),
        (("the one",), dict(max_chars=0), "max_chars"),
        (("the one", "the one \x00"), {}, "NUL"),
    ],
)
def test_bad_input_is_refused(gpt2_lm, args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        what_was_learned(gpt2_lm, random_switch(gpt2_lm, seed=1), *args, **kwargs)


def test_a_switch_for_another_model_is_refused(gpt2_lm, llama_lm):
    with pytest.raises(ValueError, match="made for"):
        what_was_learned(gpt2_lm, random_switch(llama_lm, seed=1), "the one")


def test_learned_is_a_frozen_result(gpt2_lm):
    learned = what_was_learned(gpt2_lm, random_switch(gpt2_lm, seed=1), None, words=2)
    assert isinstance(learned, Learned)
    with pytest.raises(AttributeError):
        learned.verdict = "changed"


@pytest.mark.real_model
def test_a_real_sentiment_switch_reads_held_out_reviews_on_their_sides(lm, sentiment):
    """The session's sentiment switch (first 30 + 30 example sentences) on the held-out last 10 + 10 as two documents."""
    positive = " ".join(lines(EXAMPLES / "sentiment_positive.txt")[30:])
    negative = " ".join(lines(EXAMPLES / "sentiment_negative.txt")[30:])
    with all_threads():
        learned = what_was_learned(lm, sentiment, positive, negative)
    assert learned.own_meter > 0 > learned.other_meter
    assert all(line.startswith("✓") for line in learned.verdict.splitlines()), learned.verdict
    assert {"great", "wonderful", "perfect"} & set(learned.promoted)
    assert all(s.score > 0 and s.text in positive for s in learned.spans)
