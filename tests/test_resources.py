"""Package data through importlib.resources: the shipped switches by name, and the data files the code reads."""

from __future__ import annotations

import json

import pytest

from lmswitch.io import resources

SHIPPED = {"sentiment", "detox", "formality"}


def test_shipped_switch_names():
    names = resources.shipped_switch_names()
    assert SHIPPED <= set(names)
    assert names == sorted(names)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_a_shipped_name_resolves_to_its_file(name):
    path = resources.resolve_switch_file(name)
    assert path.is_file()
    assert path.name == f"{name}.safetensors"
    assert path.parent == resources.shipped_switches_dir()
    assert path == resources.shipped_switch_path(name)


@pytest.mark.parametrize("bad", ["no-such-switch", "", "switches/sentiment", "../switches/sentiment"])
def test_an_unknown_name_is_refused_with_the_shipped_names(bad, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no file of that name here
    with pytest.raises(FileNotFoundError) as err:
        resources.resolve_switch_file(bad)
    for name in SHIPPED:
        assert name in str(err.value)


def test_an_existing_path_wins_over_a_shipped_name(tmp_path, monkeypatch):
    mine = tmp_path / "sentiment"
    mine.write_bytes(b"not the shipped switch")
    monkeypatch.chdir(tmp_path)
    assert resources.resolve_switch_file("sentiment") == mine.relative_to(tmp_path)
    assert resources.resolve_switch_file(mine) == mine
    other = tmp_path / "other.safetensors"
    other.write_bytes(b"")
    assert resources.resolve_switch_file(str(other)) == other


def test_the_data_files_are_there():
    assert (resources.prompts_dir() / "neutral.txt").is_file()
    assert (resources.prompts_dir() / "provocative.txt").is_file()
    assert resources.read_data_text("reference.txt").strip()
    assert (resources.styles_dir() / "DATA.md").is_file()
    for folder in ("sentiment", "toxicity", "formality"):
        assert len(list((resources.styles_dir() / folder).glob("*.txt"))) == 2
    assert json.loads((resources.examples_dir() / "highlight.json").read_text(encoding="utf-8"))
    assert (resources.shipped_switches_dir() / "README.md").is_file()
