"""The one parser for switch settings and ε lists (CLI, app and API all use it)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmswitch.io.parse import FALLBACK_EPS, eps_grid, parse_eps, parse_eps_list, parse_number, parse_setting, parse_switch_spec


def test_settings_from_text_and_mappings():
    assert parse_setting("sentiment=5, detox=-2") == [("sentiment", 5.0), ("detox", -2.0)]
    assert parse_setting({"sentiment": 5, "detox": "-2.5"}) == [("sentiment", 5.0), ("detox", -2.5)]
    assert parse_setting("") == parse_setting(None) == parse_setting("  ") == []
    assert parse_setting(" a = 1 ,, b=2 ") == [("a", 1.0), ("b", 2.0)]


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("sentiment", "name=eps"),
        ("=5", "name=eps"),
        ("sentiment=big", "ε of 'sentiment' must be a number"),
        ("sentiment=nan", "finite"),
        ("sentiment=inf", "finite"),
        ("a=1, a=2", "more than once"),
        ({"a": True}, "must be a number"),
        ({"a": None}, "the ε of 'a' is empty: give a number"),
        ({"a": "−2.5x"}, "must be a number"),
        ({"a": [1]}, "must be a number"),
        (42, "string or a"),
    ],
)
def test_bad_settings_get_a_clear_error(value, match):
    with pytest.raises(ValueError, match=match):
        parse_setting(value)


def test_switch_specs_take_the_last_equals_sign():
    assert parse_switch_spec("sentiment=6") == ("sentiment", 6.0)
    assert parse_switch_spec("dir/a=b.safetensors=-3") == ("dir/a=b.safetensors", -3.0)
    assert parse_switch_spec("sentiment") == ("sentiment", FALLBACK_EPS)
    for bad, said in (("", "expected NAME=EPS"), ("=3", "with a switch before '='"), ("s=x", "the ε of 's' must be a number")):
        with pytest.raises(ValueError, match=said):
            parse_switch_spec(bad)


def test_eps_lists():
    assert parse_eps_list("-10, -5; 0,5 ,10") == [-10.0, -5.0, 0.0, 5.0, 10.0]
    # the app writes ε with the typographic minus ("− → toxic"), and "1 2 3" was refused while "1;2" passed
    assert parse_eps_list("−2, 2") == [-2.0, 2.0] and parse_eps_list(" 1 2\t3 ") == [1.0, 2.0, 3.0]
    assert parse_setting("sentiment=−2") == [("sentiment", -2.0)]
    assert parse_eps_list("", default=[1.0]) == [1.0]
    with pytest.raises(ValueError, match="at least one"):
        parse_eps_list(" ")
    with pytest.raises(ValueError, match="at most 15"):
        parse_eps_list(",".join(["1"] * 16))
    assert len(parse_eps_list(",".join(["1"] * 40), max_values=101)) == 40
    with pytest.raises(ValueError, match="numbers separated by commas"):
        parse_eps_list("1, two")
    assert eps_grid(-12, 12, 5) == [-12.0, -6.0, 0.0, 6.0, 12.0] and eps_grid(-1, 1, 1) == [0.0]
    # a range that spans 0 has 0 in it, the unsteered baseline: detox's −2 … +3 gave −1.17, −0.33, 0.5 … (no 0)
    assert eps_grid(-2, 3, 7) == [-2.0, -1.0, 0.0, 0.75, 1.5, 2.25, 3.0] and eps_grid(-2, 3, 5) == [-2.0, -1.0, 0.0, 1.5, 3.0]
    assert eps_grid(-0.1, 10, 4) == [-0.1, 0.0, 5.0, 10.0]  # a short side keeps one value
    assert eps_grid(1, 3, 3) == [1.0, 2.0, 3.0] and eps_grid(-2, 3, 2) == [-2.0, 3.0]  # without 0 inside, or no room for it


@given(st.text(max_size=60))
def test_any_text_parses_or_raises_value_error(text):
    for parse in (parse_setting, parse_eps_list, parse_switch_spec):
        try:
            out = parse(text)
        except ValueError:
            continue
        values = [e for _, e in out] if parse is parse_setting else [out[1]] if parse is parse_switch_spec else out
        assert all(math.isfinite(v) for v in values)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_finite_number_is_an_eps(x):
    assert parse_eps(repr(x)) == x == parse_eps(x)


def test_one_number_parser_for_widgets_and_settings():
    """The app's number boxes had a parser of their own, which refused the typographic minus the app's labels write."""
    assert parse_number(np.float32(2.0), "ε") == 2.0 and parse_number(np.int64(7), "seed", int) == 7
    assert parse_number("−2", "seed", int) == -2 and parse_number(3.0, "steps", int) == 3 and parse_number(" 0.5 ", "ε") == 0.5
    for value, said in ((None, "seed is empty: give a number"), ("", "seed is empty"), (1.5, "seed must be a whole number; got 1.5"),
                        (True, "seed must be a number; got True"), ("inf", "seed must be a finite number"), (10**400, "seed must be a finite number")):
        with pytest.raises(ValueError, match=re.escape(said)):
            parse_number(value, "seed", int)
