"""Behaviour on the real embedded model (SmolLM2-135M-Instruct, installed offline by `make test`)."""

from __future__ import annotations

import statistics

import pytest
import torch
from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

import lmswitch as ls

pytestmark = [pytest.mark.real_model, pytest.mark.usefixtures("real_model_threads")]

NEUTRAL_PROMPTS = [
    "The restaurant down the street",
    "My weekend was",
    "The new policy at work",
    "Yesterday the meeting",
    "Her latest album",
    "The weather this morning",
    "Our trip to the coast",
    "The city council announced",
]


def test_zero_eps_is_exactly_the_base_model(lm, sentiment):
    ids = lm.tokenizer("The weather today is", return_tensors="pt").input_ids
    with torch.no_grad():
        base = lm.model(ids).logits
        with ls.steer(lm, [(sentiment, 0.0)]):
            same = lm.model(ids).logits
        with ls.steer(lm, [(sentiment, 5.0)]):
            moved = lm.model(ids).logits
    assert torch.equal(base, same)
    assert not torch.allclose(base, moved)


def test_sentiment_switch_steers_generations(lm, sentiment):
    """~30 + 30 project-written sentences → clearly more positive text at +ε and more negative at −ε than the unsteered
    model writes on the same prompts and seeds (vaderSentiment, mean compound)."""
    vader = SentimentIntensityAnalyzer()
    scores = {}
    for eps in (-5.0, 0.0, 5.0):
        texts = ls.generate(lm, NEUTRAL_PROMPTS, [(sentiment, eps)], samples=3, seed=0, max_new_tokens=25)
        scores[eps] = statistics.mean(vader.polarity_scores(t)["compound"] for t in texts)
    assert scores[5.0] - scores[0.0] > 0.3 and scores[0.0] - scores[-5.0] > 0.3, scores  # each side moves on its own
    assert scores[5.0] > 0 > scores[-5.0], scores


def test_guided_decoding_goes_much_further_at_a_mild_eps(lm, sentiment):
    """The 30 + 30 sentence switch's judge, guiding 4 candidates per piece at ε ±2, spreads the continuations' sentiment
    far more than plain steering at the same ε, on the same prompts and seeds (vaderSentiment, mean compound)."""
    vader = SentimentIntensityAnalyzer()
    assert sentiment.judge is not None

    def spread(guide: int) -> float:
        mean = {eps: statistics.mean(vader.polarity_scores(t)["compound"] for t in ls.generate(
            lm, NEUTRAL_PROMPTS, [(sentiment, eps)], samples=3, seed=0, max_new_tokens=25, guide=guide)) for eps in (-2.0, 2.0)}
        return mean[2.0] - mean[-2.0]

    plain, guided = spread(1), spread(4)
    assert guided > 0.4 and guided > plain + 0.2, (plain, guided)


def test_switch_file_round_trip_on_real_model(lm, sentiment, tmp_path):
    path = sentiment.save(tmp_path / "sentiment.safetensors")
    loaded = ls.load_switch(path, lm)
    assert torch.equal(loaded.W, sentiment.W)
    assert loaded.card["n_positive"] == 30


def test_language_warning_flags_text_the_model_tokenizes_poorly(lm):
    from lmswitch.core.train import language_warning

    english = "The library stays open late on weekdays, and the new reading room is warm and quiet in winter."
    chinese = "每当城市预算紧张时，总有人提议关闭一个图书馆分馆。这个论点乍一听很有道理。"
    german = ("Immer wenn das Budget der Stadt knapp ist, schlägt jemand vor, eine Zweigstelle der Bibliothek zu schließen. "
              "Das Argument klingt zunächst vernünftig, aber es verkennt, wofür eine Bibliothek da ist.")
    assert language_warning(lm, english) is None
    # four short English sentences tokenize at 1.45× the reference's rate (a capital, a full stop, "Tr|ains"): English,
    # and were called "a language or script that 'smollm2-135m' handles poorly"
    assert language_warning(lm, ["Trains are good.", "I love trains.", "Trains are bad.", "I hate trains."]) is None
    for text in (chinese, german):
        warning = language_warning(lm, text)
        assert warning is not None and "language or script" in warning and lm.name in warning
