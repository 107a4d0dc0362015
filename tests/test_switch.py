"""Switch files: round trip, model checks, refusal of corrupted files, atomic saving,
constructor validation, and files moving between dtypes of one model (the fingerprint itself: test_models.py)."""

from __future__ import annotations

import copy
import json
import math
import os
import random
import stat

import pytest
import torch
from conftest import WORDS_A, WORDS_B, random_switch
from safetensors import safe_open
from safetensors.torch import save_file
from tiny import sample_texts

import lmswitch as ls
import lmswitch.core.switch
from lmswitch import LanguageModel, Switch, SwitchFileError, load_switch


@pytest.fixture
def switch(gpt2_lm) -> Switch:
    return random_switch(
        gpt2_lm,
        seed=3,
        name="sentiment",
        description="happy ↔ sad, ünïcode ✓",
        eps0=2e-3,
        eps_range=(-4.0, 6.5),
        positive_label="happy",
        negative_label="sad",
        card={"n_positive": 30, "heldout_gain": 0.21, "nested": {"losses": [4.1, 3.9]}, "note": None},
    )


@pytest.fixture
def saved(switch, tmp_path):
    return switch.save(tmp_path / "sentiment.safetensors")


def real_metadata(path) -> dict:
    with safe_open(path, framework="pt") as f:
        return dict(f.metadata())


# --- round trip ----------------------------------------------------------------------------


def test_round_trip_is_exact(switch, saved, gpt2_lm):
    assert saved.name == "sentiment.safetensors" and saved.is_file()
    loaded = load_switch(saved, model=gpt2_lm)
    assert torch.equal(loaded.W, switch.W)
    assert loaded.W.dtype == torch.float32
    assert loaded.header() == switch.header()
    assert loaded.eps_range == (-4.0, 6.5)
    assert loaded.card["nested"] == {"losses": [4.1, 3.9]}
    assert loaded.model_fingerprint == gpt2_lm.fingerprint
    # the file is the documented format: one tensor W, card JSON in the header
    meta = real_metadata(saved)
    assert meta["format"] == "lmswitch"
    assert json.loads(meta["switch"])["description"] == "happy ↔ sad, ünïcode ✓"


def test_load_accepts_str_paths_and_no_model(saved):
    loaded = load_switch(str(saved))
    assert loaded.name == "sentiment"


def test_load_for_another_model_is_refused(saved, make_lm):
    other = make_lm("gpt2", seed=1)  # same architecture and size, other weights
    with pytest.raises(SwitchFileError, match="fingerprint"):
        load_switch(saved, model=other)
    other_family = make_lm("llama")
    with pytest.raises(SwitchFileError, match="fingerprint"):
        load_switch(saved, model=other_family)


def test_load_for_another_hidden_size_is_refused(saved, make_lm):
    wider = make_lm("gpt2", hidden=48)
    with pytest.raises(SwitchFileError, match=r"32 × 32.*hidden size 48; it was made for .*\. Load the model it was made for, or transfer the switch"):
        load_switch(saved, model=wider)


def test_a_file_whose_matrix_disagrees_with_its_own_model_is_called_inconsistent(make_lm, tmp_path):
    """A header naming the loaded model over a matrix of another size (a damaged or edited file): "load the model it was
    made for" could not be followed, since that model is the one loaded."""
    lm = make_lm("gpt2")
    edited = Switch(W=torch.zeros(8, 8), name="edited", model_name=lm.name, model_fingerprint=lm.fingerprint)
    edited.save(tmp_path / "edited.safetensors")
    with pytest.raises(SwitchFileError, match=r"says it was made for .*but its matrix is 8 × 8: the file is inconsistent") as caught:
        load_switch(tmp_path / "edited.safetensors", model=lm)
    assert "Load the model it was made for" not in str(caught.value)


def test_save_requires_safetensors_suffix(switch, tmp_path):
    with pytest.raises(ValueError, match=".safetensors"):
        switch.save(tmp_path / "sentiment.pt")
    assert list(tmp_path.iterdir()) == []


def test_save_creates_missing_folders(switch, tmp_path):
    path = switch.save(tmp_path / "a" / "b" / "s.safetensors")
    assert torch.equal(load_switch(path).W, switch.W)


def test_a_new_file_gets_the_umasks_permissions_and_a_replaced_one_keeps_its_own(switch, tmp_path):
    old = os.umask(0o022)
    try:
        path = switch.save(tmp_path / "s.safetensors")
        assert stat.S_IMODE(path.stat().st_mode) == 0o644  # readable by a team, as any new file (not a temp file's 0600)
        path.chmod(0o640)
        switch.save(path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o640
    finally:
        os.umask(old)
    assert [p.name for p in tmp_path.iterdir()] == ["s.safetensors"]  # no temporary file left beside it


# --- corrupted files ----------------------------------------------------------------------------


def test_a_folder_given_as_a_switch_is_called_a_folder(tmp_path):
    with pytest.raises(SwitchFileError, match=f"{tmp_path} is a folder; give a switch file in it"):
        load_switch(tmp_path)


def test_missing_file_names_the_shipped_switches(tmp_path):
    """A path that names no file is said to be missing first (it read "no switch file … and no shipped switch of that
    name", as if a name had been misspelt); a bare name that is neither is said so."""
    with pytest.raises(SwitchFileError, match=f"no such file: '.*nope.safetensors' \\(check the path; {tmp_path} holds no "
                                              "nope.safetensors\\); or give a shipped switch's name, one of: detox, formality, sentiment"):
        load_switch(tmp_path / "nope.safetensors")
    with pytest.raises(SwitchFileError, match=f"no such file: '.*gone/nope.safetensors' \\(check the path; there is no folder {tmp_path}/gone\\)"):
        load_switch(tmp_path / "gone" / "nope.safetensors")
    with pytest.raises(SwitchFileError, match="no switch file 'sentimnet' and no shipped switch of that name; give a "
                                              ".safetensors path or one of: detox, formality, sentiment"):
        load_switch("sentimnet")


def test_a_shipped_switch_loads_by_name_and_a_file_of_that_name_wins(saved, tmp_path, monkeypatch):
    shipped = load_switch("detox")
    assert shipped.name == "detox" and shipped.card.fluent_eps is not None
    monkeypatch.chdir(tmp_path)
    (tmp_path / "detox").write_bytes(saved.read_bytes())  # a file named like a shipped switch: the user's own wins
    assert load_switch("detox").name == "sentiment"


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.99])
def test_truncated_file(saved, keep):
    data = saved.read_bytes()
    saved.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(SwitchFileError, match="truncated or corrupted"):
        load_switch(saved)


def test_random_bytes(tmp_path):
    path = tmp_path / "random.safetensors"
    path.write_bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0), dtype=torch.uint8).numpy().tobytes())
    with pytest.raises(SwitchFileError, match="not a valid safetensors file"):
        load_switch(path)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.safetensors"
    path.write_bytes(b"")
    with pytest.raises(SwitchFileError, match="not a valid safetensors file"):
        load_switch(path)


def test_safetensors_without_switch_header(tmp_path, switch):
    path = tmp_path / "plain.safetensors"
    save_file({"W": switch.W}, str(path))
    with pytest.raises(SwitchFileError, match="not an lmswitch switch"):
        load_switch(path)
    save_file({"W": switch.W}, str(path), metadata={"format": "something-else", "switch": "{}"})
    with pytest.raises(SwitchFileError, match="not an lmswitch switch"):
        load_switch(path)


def test_a_switch_of_another_file_format_version_is_refused(tmp_path, saved, switch):
    """Read as version 1, a later format's header could steer wrongly without a word."""
    path = tmp_path / "later.safetensors"
    save_file({"W": switch.W}, str(path), metadata=real_metadata(saved) | {"version": "2"})
    with pytest.raises(SwitchFileError, match="file format version '2'; this lmswitch reads version 1"):
        load_switch(path)
    unversioned = {k: v for k, v in real_metadata(saved).items() if k != "version"}  # (as no release wrote, but read as 1)
    save_file({"W": switch.W}, str(path), metadata=unversioned)
    assert torch.equal(load_switch(path).W, switch.W)


def test_nan_matrix_with_valid_header(tmp_path, saved, switch):
    meta = real_metadata(saved)
    W = switch.W.clone()
    W[3, 5] = float("nan")
    path = tmp_path / "nan.safetensors"
    save_file({"W": W}, str(path), metadata=meta)
    with pytest.raises(SwitchFileError, match="NaN"):
        load_switch(path)
    W[3, 5] = float("-inf")
    save_file({"W": W}, str(path), metadata=meta)
    with pytest.raises(SwitchFileError, match="infinite"):
        load_switch(path)


@pytest.mark.parametrize("shape", [(32, 16), (32,), (2, 32, 32)])
def test_non_square_matrix_with_valid_header(tmp_path, saved, shape):
    path = tmp_path / "bad.safetensors"
    save_file({"W": torch.randn(*shape)}, str(path), metadata=real_metadata(saved))
    with pytest.raises(SwitchFileError, match="square"):
        load_switch(path)


def test_wrong_tensor_name(tmp_path, saved, switch):
    path = tmp_path / "renamed.safetensors"
    save_file({"weight": switch.W}, str(path), metadata=real_metadata(saved))
    with pytest.raises(SwitchFileError, match="should hold the tensor 'W' and at most a 'judge'"):
        load_switch(path)
    save_file({"W": switch.W, "judge": torch.zeros(3)}, str(path), metadata=real_metadata(saved))
    with pytest.raises(SwitchFileError, match="judge of shape"):
        load_switch(path)
    save_file({"W": switch.W, "extra": torch.zeros(1)}, str(path), metadata=real_metadata(saved))
    with pytest.raises(SwitchFileError, match="should hold the tensor 'W' and at most a 'judge'"):
        load_switch(path)


def test_integer_matrix_is_refused(tmp_path, saved):
    path = tmp_path / "int.safetensors"
    save_file({"W": torch.ones(32, 32, dtype=torch.int32)}, str(path), metadata=real_metadata(saved))
    with pytest.raises(SwitchFileError, match="dtype"):
        load_switch(path)


@pytest.mark.parametrize(
    "header",
    ["{not json", "[1, 2]", '{"eps0": "big"}', '{"eps0": -1.0}', '{"eps_range": 3}', '{"eps_range": [1]}', '{"eps_range": ["a", "b"]}',
     '{"eps_range": [-Infinity, Infinity]}', '{"eps_range": [NaN, NaN]}', '{"eps_range": [-1e300, 1e300]}', '{"eps_range": [2, 8]}',
     '{"name": 5}', '{"positive_label": null}', '{"description": ["a"]}'],
)
def test_malformed_header(tmp_path, switch, header):
    path = tmp_path / "header.safetensors"
    save_file({"W": switch.W}, str(path), metadata={"format": "lmswitch", "version": "1", "switch": header})
    with pytest.raises(SwitchFileError, match="header|eps0|eps_range|must be text"):
        load_switch(path)


def test_half_precision_file_is_accepted(tmp_path, saved, switch):
    path = tmp_path / "half.safetensors"
    save_file({"W": switch.W.to(torch.bfloat16)}, str(path), metadata=real_metadata(saved))
    loaded = load_switch(path)
    assert loaded.W.dtype == torch.float32
    assert torch.equal(loaded.W, switch.W.to(torch.bfloat16).float())


# --- atomic saving ----------------------------------------------------------------------------


def test_failed_save_keeps_the_old_file_and_leaves_no_temp_files(tmp_path, saved, switch, monkeypatch):
    before = saved.read_bytes()
    written: list[str] = []

    def broken_save_file(tensors, filename, metadata=None):
        written.append(str(filename))
        with open(filename, "wb") as fh:
            fh.write(b"\x00garbage" * 100)
        raise OSError("disk full")

    monkeypatch.setattr(lmswitch.core.switch, "save_file", broken_save_file)
    other = 2 * switch
    with pytest.raises(OSError, match="disk full"):
        other.save(saved)
    assert written and os.path.dirname(written[0]) == str(saved.parent)
    assert written[0] != str(saved)  # it wrote to a temp file, not over the switch
    assert saved.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [saved.name]
    assert torch.equal(load_switch(saved).W, switch.W)


def test_interrupted_save_leaves_no_temp_files(tmp_path, switch, monkeypatch):
    def interrupted(tensors, filename, metadata=None):
        with open(filename, "wb") as fh:
            fh.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(lmswitch.core.switch, "save_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        switch.save(tmp_path / "new.safetensors")
    assert list(tmp_path.iterdir()) == []


def test_overwrite_replaces_the_file_and_leaves_no_temp_files(tmp_path, saved, switch):
    other = -switch
    other.save(saved)
    assert sorted(p.name for p in tmp_path.iterdir()) == [saved.name]
    loaded = load_switch(saved)
    assert torch.equal(loaded.W, -switch.W)
    assert (loaded.positive_label, loaded.negative_label) == ("sad", "happy")


def test_a_loaded_switch_is_its_own_copy_when_the_file_is_rewritten_in_place(tmp_path, saved, switch):
    """A `cp` over a switch file rewrites the same inode: a loaded switch must not see it (it read the old file's memory
    map until 2026-11-29, so its matrix shifted with the new header's length)."""
    loaded, before = load_switch(saved), switch.W.clone()
    other = -switch
    other.card = other.card.updated(note="x" * 1000)  # a longer header: the tensor data move
    replacement = other.save(tmp_path / "other.safetensors").read_bytes()
    with open(saved, "r+b") as f:  # in place, as `cp` writes
        f.write(replacement)
        f.truncate()
    assert torch.equal(loaded.W, before) and torch.equal(load_switch(saved).W, -before)


# --- constructor ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_constructor_rejects_non_finite_matrix(bad):
    W = torch.eye(8)
    W[1, 2] = bad
    with pytest.raises(SwitchFileError, match="NaN or infinite"):
        Switch(W=W)


@pytest.mark.parametrize("shape", [(8, 4), (4, 8), (8,), (2, 8, 8), ()])
def test_constructor_rejects_non_square_matrix(shape):
    with pytest.raises(SwitchFileError, match="square"):
        Switch(W=torch.zeros(shape))


@pytest.mark.parametrize("eps0", [0.0, -1e-3, float("nan"), float("inf")])
def test_constructor_rejects_bad_eps0(eps0):
    with pytest.raises(SwitchFileError, match="eps0"):
        Switch(W=torch.eye(4), eps0=eps0)


@pytest.mark.parametrize("eps_range", [(1.0,), (1.0, 2.0, 3.0), ("low", "high"), 3.0, None, (-math.inf, math.inf), (math.nan, 1.0),
                                       (0.0, 5.0), (-5.0, 0.0), (4.0, -4.0), (-2e3, 10.0)])
def test_constructor_rejects_bad_eps_range(eps_range):
    with pytest.raises(SwitchFileError, match="eps_range"):
        Switch(W=torch.eye(4), eps_range=eps_range)


def test_constructor_normalises_the_matrix():
    W = torch.eye(4, dtype=torch.float64).T  # float64, non-contiguous
    s = Switch(W=W)
    assert s.W.dtype == torch.float32 and s.W.is_contiguous() and s.dim == 4
    W[0, 0] = 7.0
    assert s.W[0, 0] == 1.0  # a copy, not a view of the caller's tensor


# --- fingerprints -----------------------------------------------------------------------------


def test_switch_file_moves_between_dtypes(saved, gpt2_lm):
    lm16 = LanguageModel(model=copy.deepcopy(gpt2_lm.model).to(torch.bfloat16), tokenizer=gpt2_lm.tokenizer, name="bf16")
    assert load_switch(saved, model=lm16).model_fingerprint == lm16.fingerprint



def test_the_slider_range_stays_inside_a_fractional_fluent_range():
    s = Switch(torch.zeros(4, 4), card={"fluent_eps": [-2.5, 4.5]})
    assert s.slider_range() == (-2.0, 4.0) and s.slider_range(wide=True) == (-8.0, 8.0)
    narrow = Switch(torch.zeros(4, 4), card={"fluent_eps": [-0.5, 0.5]})
    assert narrow.slider_range() == (-0.5, 0.5)
    # one side under a whole ε keeps its side, at the slider's half step: −2 … +0.5 was drawn −2 … 0, and nothing past
    # 0 could be steered toward + (a switch from 2 + 2 sentences)
    for fluent, drawn in (([-2, 0.5], (-2.0, 0.5)), ([-2, 0.8], (-2.0, 0.5)), ([-0.7, 3.2], (-0.5, 3.0)), ([-2, 0.3], (-2.0, 0.3))):
        assert Switch(torch.zeros(4, 4), card={"fluent_eps": fluent}).slider_range() == drawn
    # a value set on the slider (a recommended ε inside the fluent range may lie past its whole-ε end) goes to the nearest end
    assert (s.on_slider(4.3), s.on_slider(-3.0), s.on_slider(1.5), s.on_slider(6.0, wide=True)) == (4.0, -2.0, 1.5, 6.0)


def test_a_switch_shows_itself_in_one_short_line(switch):
    """Not the dataclass's repr, which printed all of W and the card (12,000 characters in an error message)."""
    shown = repr(switch)
    assert len(shown) < 200 and "\n" not in shown and switch.name in shown and str(switch.dim) in shown


def test_distinct_keeps_the_first_of_each_matrix_in_order(switch):
    from lmswitch.core.switch import distinct

    other = copy.deepcopy(switch)
    other.W = other.W * 2
    twin = copy.deepcopy(switch)
    twin.name = "twin"
    assert [s.name for s in distinct([switch, other, twin])] == [switch.name, other.name]


def test_a_switch_too_small_to_change_a_head_input_steers_nothing(switch):
    """All zeros, or a rounding's worth (a 1e-30 switch passed the all-zero check, and a page's meter read it): even
    ε at the end of any switch's range leaves the head input as it was in float32; a trained switch's does not."""
    c = torch.randn(8, switch.dim, generator=torch.Generator().manual_seed(0))
    eps = lmswitch.core.switch.MAX_EPS_RANGE

    def moved(s: Switch) -> torch.Tensor:
        return c + eps * s.eps0 * c @ s.W.T

    tiny = Switch(W=switch.W * 1e-12 / float(torch.linalg.matrix_norm(switch.W)), eps0=switch.eps0)
    assert Switch(W=torch.zeros_like(switch.W)).steers_nothing and tiny.steers_nothing
    assert torch.equal(moved(tiny), c)
    assert not switch.steers_nothing and not torch.equal(moved(switch), c)
    small = Switch(W=switch.W * 1e-3 / float(torch.linalg.matrix_norm(switch.W)), eps0=switch.eps0)  # ε = 1000 moves it 2e-3
    assert not small.steers_nothing and not torch.equal(moved(small), c)


def test_a_switch_changed_after_it_was_made_is_checked_again_before_it_is_written(tiny_lm, tmp_path):
    """A card given as a dict is parsed, and a NaN matrix refused, on save as on construction (it raised AttributeError
    for the card, and wrote the NaN file that load_switch then refused)."""
    s = random_switch(tiny_lm, seed=3)
    s.card = {"fluent_eps": [-2, 2]}
    assert load_switch(s.save(tmp_path / "a.safetensors")).card.fluent_eps == (-2.0, 2.0)
    s.W = torch.full_like(s.W, float("nan"))
    with pytest.raises(SwitchFileError, match="NaN or infinite"):
        s.save(tmp_path / "b.safetensors")
    assert not (tmp_path / "b.safetensors").exists()
    with pytest.raises(SwitchFileError, match="a switch is loaded from a file path or a shipped switch's name"):
        load_switch(None)


def test_a_model_and_a_card_read_briefly(tiny_lm):
    """A notebook shows a model in a line (it printed the module tree and every added token) and a card without its curves."""
    text = repr(tiny_lm)
    assert text.startswith(f"LanguageModel({tiny_lm.name!r}, ") and len(text) < 200 and "Linear" not in text
    texts = sample_texts(random.Random(1), WORDS_A, 12), sample_texts(random.Random(2), WORDS_B, 12)
    card = ls.train_switch(tiny_lm, *texts, config=ls.TrainConfig(steps=30)).card
    assert len(card.training.train_losses) > 1 and "train_losses" not in repr(card) and "heldout_gain" in repr(card)
