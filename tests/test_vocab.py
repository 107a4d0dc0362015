"""Readable words: the vocabulary's word tokens, space markers, and whole words vs word fragments."""

from __future__ import annotations

import pytest

from lmswitch.lenses.vocab import is_readable_word, token_words, word_forms


@pytest.mark.parametrize(
    ("surface", "ok"),
    [
        ("wonderful", True), ("Zürich", True), ("don't", True), ("well-known", True), ("日本語", True),
        ("ok", False), ("x2", False), ("</", False), ("...", False), ("", False), ("\ufffd\ufffd\ufffd", False),
        ("   ", False), ("123", False), ("_init", False), ("-ing", False),
    ],
)
def test_readable_word_filter(surface, ok):
    assert is_readable_word(surface) is ok


def test_token_words_on_a_word_level_vocabulary(tokenizer):
    tw = token_words(tokenizer)
    assert tw.surface[tokenizer.convert_tokens_to_ids("happy")] == "happy"
    assert tw.surface[tokenizer.convert_tokens_to_ids("of")] == ""  # too short
    assert tw.surface[tokenizer.eos_token_id] == ""  # special tokens are never words
    assert not any(tw.continues_word)  # no space markers: every token is a whole word
    assert all(tw.starts_word[i] for i in tw.readable_ids())


def test_word_level_tokens_are_complete_words(gpt2_lm):
    ids = gpt2_lm.tokenizer.convert_tokens_to_ids(["happy", "grief"])
    assert word_forms(gpt2_lm, ids) == ["happy", "grief"]  # every token reads as itself
