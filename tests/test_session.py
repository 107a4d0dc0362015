"""serve/session.py without any front end: the shared switch folder (``SwitchLibrary``), names usable as file
names (``check_name``), and one user's private switches and stop flags (``Session``)."""

from __future__ import annotations

import copy
import threading
import time

import pytest
import torch
from conftest import random_switch, wait_for

from lmswitch import Switch, SwitchFileError, load_switch
from lmswitch.serve import session as session_module
from lmswitch.serve.session import SETTLE, Session, SwitchLibrary, check_name

NAME_RULE = "switch names are 1–48 characters"


@pytest.fixture
def folder(tmp_path, llama_lm, gpt2_lm):
    """A library folder: two good switches, a corrupt file, a switch of the wrong size, one made for another model."""
    lib = tmp_path / "library"
    lib.mkdir()
    random_switch(llama_lm, seed=1, name="alpha").save(lib / "alpha.safetensors")
    random_switch(llama_lm, seed=2, name="beta").save(lib / "beta.safetensors")
    (lib / "broken.safetensors").write_bytes(b"not a switch at all")
    Switch(W=torch.eye(8), name="small").save(lib / "small.safetensors")  # no fingerprint, but 8 × 8 for a 32-wide model
    random_switch(gpt2_lm, seed=3, name="foreign").save(lib / "foreign.safetensors")
    (lib / "notes.txt").write_text("not a switch file, and not looked at")
    return lib


@pytest.fixture
def library(llama_lm, folder) -> SwitchLibrary:
    return SwitchLibrary(llama_lm, folder)


def file_bytes(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# --- the library folder ------------------------------------------------------------------------


def test_library_loads_good_switches_and_skips_bad_files_with_the_reason(llama_lm, folder, gpt2_lm):
    Switch(W=torch.zeros(llama_lm.hidden_size, llama_lm.hidden_size), name="empty", model_name=llama_lm.name,
           model_fingerprint=llama_lm.fingerprint).save(folder / "empty.safetensors")
    library = SwitchLibrary(llama_lm, folder)
    assert "would not steer anything" in library.skipped.pop("empty.safetensors")
    assert library.names() == ["alpha", "beta"]
    assert torch.equal(library.get("alpha").W, load_switch(library.folder / "alpha.safetensors").W)
    assert set(library.skipped) == {"broken.safetensors", "small.safetensors"}
    assert "not a valid safetensors file" in library.skipped["broken.safetensors"]
    assert "hidden size" in library.skipped["small.safetensors"]
    assert library.other_models == {"foreign.safetensors": gpt2_lm.name}  # listed, not loaded, not an error
    assert library.get("broken") is None and library.get("foreign") is None and library.get("nope") is None


def test_library_without_a_folder_is_empty_and_cannot_save(llama_lm, tmp_path):
    lib = SwitchLibrary(llama_lm, None)
    assert lib.names() == [] and lib.skipped == {} and lib.other_models == {}
    with pytest.raises(ValueError, match="no switch folder"):
        lib.save("alpha", random_switch(llama_lm, seed=1))
    with pytest.raises(ValueError, match="does not exist"):
        SwitchLibrary(llama_lm, tmp_path / "missing")


def test_library_save_writes_a_loadable_file(library, llama_lm):
    switch = random_switch(llama_lm, seed=4, name="draft")
    path = library.save("mood", switch)
    assert path == library.folder / "mood.safetensors" and switch.name == "mood"
    assert library.names() == ["alpha", "beta", "mood"] and library.get("mood") is switch
    loaded = load_switch(path, llama_lm)
    assert torch.equal(loaded.W, switch.W) and loaded.name == "mood"
    assert SwitchLibrary(llama_lm, library.folder).names() == ["alpha", "beta", "mood"]  # the next start sees it


@pytest.mark.parametrize("name", ["alpha", "broken", "foreign", "small"])
def test_library_save_never_overwrites(library, llama_lm, name):
    """A taken name is refused whether its file was loaded, skipped as corrupt, or made for another model."""
    before = file_bytes(library.folder)
    with pytest.raises(ValueError, match=f"already has a switch named '{name}'"):
        library.save(name, random_switch(llama_lm, seed=5))
    assert file_bytes(library.folder) == before


def test_library_save_refuses_a_switch_for_another_model_and_a_bad_name(library, gpt2_lm, llama_lm):
    before = file_bytes(library.folder)
    with pytest.raises(SwitchFileError, match="made for"):
        library.save("theirs", random_switch(gpt2_lm, seed=6))
    with pytest.raises(ValueError, match=NAME_RULE):
        library.save("../escape", random_switch(llama_lm, seed=6))
    assert file_bytes(library.folder) == before
    assert not (library.folder.parent / "escape.safetensors").exists()


# --- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["../x", "a/b", "a\\b", "", "   ", "x" * 49, ".hidden", "-dash", "a b", "nul\x00", None, 42])
def test_check_name_refuses_path_like_and_odd_names(bad):
    with pytest.raises(ValueError, match=NAME_RULE) as err:
        check_name(bad)
    assert repr(bad) in str(err.value)  # the message shows what was given


def test_a_long_refused_name_is_shown_cut():
    """A 200-character name was repeated whole in the refusal's toast."""
    with pytest.raises(ValueError, match=NAME_RULE) as err:
        check_name("y" * 200)
    assert str(err.value).endswith(f"got {'y' * 48!r}… (200 characters)")


@pytest.mark.parametrize(("name", "expected"), [("a", "a"), ("x" * 48, "x" * 48), ("mood_v2.1+b-c", "mood_v2.1+b-c"),
                                                (" padded\t", "padded")])
def test_check_name_accepts_file_names_and_strips_spaces(name, expected):
    assert check_name(name) == expected


# --- a session's switches -----------------------------------------------------------------------


def test_add_makes_names_unique_across_the_session_and_the_library(library, llama_lm):
    s = Session()
    names = [s.add(random_switch(llama_lm, seed=10 + k, name="mood"), library) for k in range(3)]
    assert names == ["mood", "mood-2", "mood-3"]
    assert [s.switches[n].name for n in names] == names  # each switch carries its final name
    assert s.add(random_switch(llama_lm, seed=20, name="alpha"), library) == "alpha-2"  # library names are taken too
    assert s.add(random_switch(llama_lm, seed=21), library, name="mood") == "mood-4"  # an explicit name, made unique
    assert s.order == ["alpha", "beta", "mood", "mood-2", "mood-3", "alpha-2", "mood-4"]  # library switches first
    assert s.available(library) == s.order
    assert s.get("mood-2", library) is s.switches["mood-2"] and s.get("alpha", library) is library.get("alpha")
    with pytest.raises(ValueError, match="no switch named 'nope'.*available: alpha, beta, mood"):
        s.get("nope", library)


def test_add_refuses_bad_names_other_models_and_too_many_switches(library, llama_lm, gpt2_lm, monkeypatch):
    s = Session()
    with pytest.raises(ValueError, match=NAME_RULE):
        s.add(random_switch(llama_lm, seed=1), library, name="../x")
    with pytest.raises(SwitchFileError, match="made for"):
        s.add(random_switch(gpt2_lm, seed=1), library)
    monkeypatch.setattr(session_module, "MAX_SESSION_SWITCHES", 2)
    s.add(random_switch(llama_lm, seed=1), library)
    s.add(random_switch(llama_lm, seed=2), library)
    with pytest.raises(ValueError, match="already holds 2 switches"):
        s.add(random_switch(llama_lm, seed=3), library)
    assert s.switches.keys() == {"random1", "random2"}


def test_session_save_moves_a_switch_into_the_library(library, llama_lm, gpt2_lm):
    s, other = Session(), Session()
    s.add(random_switch(llama_lm, seed=7, name="keeper"), library)
    assert "keeper" not in other.available(library)  # private until saved
    name, path = s.save("keeper", library)
    assert name == "keeper" and path.name == "keeper.safetensors" and "keeper" not in s.switches
    assert "keeper" in s.available(library) and "keeper" in other.available(library)
    with pytest.raises(ValueError, match="already in the library"):
        s.save("keeper", library)
    with pytest.raises(ValueError, match="no session switch named 'ghost'"):
        s.save("ghost", library)
    random_switch(gpt2_lm, seed=4, name="foreign-2").save(library.folder / "foreign-2.safetensors")
    s.add(random_switch(llama_lm, seed=8), library, name="foreign")  # the library skips 'foreign' (another model's file)
    assert s.save("foreign", library)[0] == "foreign-3"  # its file and the next one's are not overwritten
    with pytest.raises(ValueError, match="no switch is picked: pick one$"):  # an empty picker (it said "no switch named 'None'")
        s.get(None, library)


# --- jobs ----------------------------------------------------------------------------------------


def test_a_new_generation_sets_the_previous_flag():
    s = Session()
    first = s.new_generation()
    assert not first.is_set()
    second = s.new_generation()
    assert first.is_set() and not second.is_set() and second is not first
    third = s.new_generation()
    assert second.is_set() and not third.is_set()


def test_a_page_generation_waits_for_the_older_ones_to_end_and_not_forever():
    s = Session()
    first = s.new_generation()
    started = time.monotonic()
    s.after_older_generations(first)  # none older, none ended: at once, not even SETTLE
    assert time.monotonic() - started < SETTLE
    second = s.new_generation()
    s.new_generation(supersede=False)  # a script's
    third = s.new_generation()
    threading.Timer(0.3, s.end_generation, args=(first,)).start()
    threading.Timer(0.6, s.end_generation, args=(second,)).start()
    s.after_older_generations(third)  # the first two, not the script's (it never ends here), then SETTLE
    assert 0.6 + SETTLE <= time.monotonic() - started < 0.6 + SETTLE + 1.0
    s.end_generation(third)
    s.new_generation()
    fifth = s.new_generation()
    started = time.monotonic()
    s.after_older_generations(fifth, timeout=0.4)  # the fourth never ends (a client gone): at most the timeout
    assert 0.4 <= time.monotonic() - started < 1.0
    s.end_generation(fifth)
    sixth = s.new_generation()
    started = time.monotonic()
    s.after_older_generations(sixth, timeout=0.4)  # the fourth, given up on, is not waited for again: SETTLE at most
    assert time.monotonic() - started < SETTLE + 0.1


def test_a_scripts_generations_neither_stop_nor_are_stopped_and_all_stop_when_the_page_closes():
    s = Session()
    slider = s.new_generation()
    a, b = s.new_generation(supersede=False), s.new_generation(supersede=False)
    assert not any(f.is_set() for f in (slider, a, b))  # two requests of one script run side by side, beside the slider's
    newer = s.new_generation()
    assert slider.is_set() and not a.is_set() and not b.is_set()  # a newer slider stops the older slider only
    s.stop_generation()  # the page closed
    assert newer.is_set() and a.is_set() and b.is_set()


def test_one_training_run_at_a_time():
    s = Session()
    assert s.cancel_training() is False  # none running
    flag = s.start_training()
    assert not flag.is_set()
    with pytest.raises(ValueError, match="already going"):
        s.start_training()
    s.end_training(flag)
    assert flag.is_set() and s.cancel_training() is False  # ended: nothing left to cancel
    again = s.start_training()  # a new run may start
    assert again is not flag and not again.is_set()
    assert s.cancel_training() is True and again.is_set()
    after_cancel = s.start_training()  # a cancelled run no longer blocks a new one
    s.end_training(again)  # the cancelled run finishing late leaves the new run alone
    assert not after_cancel.is_set() and s.cancel_training() is True and after_cancel.is_set()


def test_deepcopy_gives_a_fresh_empty_session(library, llama_lm):
    """gr.State deep-copies its initial Session for every browser session: nothing may be shared."""
    s = Session()
    s.add(random_switch(llama_lm, seed=8, name="mine"), library)
    s.model = "tiny-other"
    generation, training = s.new_generation(), s.start_training()
    fresh = copy.deepcopy(s)
    assert isinstance(fresh, Session) and fresh is not s
    assert fresh.switches == {} and fresh.order == [] and fresh.model is None
    assert fresh.cancel_training() is False and not training.is_set()
    fresh.new_generation()
    assert not generation.is_set()  # the copy's new generation does not stop the original's
    fresh.start_training()  # the copy has its own training slot
    assert s.switches.keys() == {"mine"} and s.model == "tiny-other" and fresh._lock is not s._lock
    nested = copy.deepcopy({"state": s})["state"]  # also inside a container
    assert isinstance(nested, Session) and nested.switches == {}


# --- a closed page: switches moved to disk ---------------------------------------------------------


def test_spill_moves_unsaved_switches_to_disk_and_the_first_use_brings_them_back(library, llama_lm, gpt2_lm, tmp_path):
    s = Session()
    mood = random_switch(llama_lm, seed=5, name="mood")
    mood.card = mood.card.updated(recommended_eps=3.5)
    s.add(mood, library)
    s.add(random_switch(gpt2_lm, seed=6, name="other"), SwitchLibrary(gpt2_lm, None))  # made for another model
    assert s.spill(tmp_path) == 2
    assert s.switches == {} and len(list(tmp_path.glob("*.safetensors"))) == 2  # out of memory, in files
    assert s.available(library) == ["alpha", "beta", "mood"]  # listed without reading anything back
    assert len(list(tmp_path.glob("*.safetensors"))) == 2
    back = s.get("mood", library)  # the first use reads it back
    assert torch.equal(back.W, mood.W) and back.name == "mood" and back.card["recommended_eps"] == 3.5
    assert s.switches.keys() == {"mood"} and len(list(tmp_path.glob("*.safetensors"))) == 1  # its file is gone
    assert s.spill(tmp_path) == 1 and s.save("mood", library)[1].name == "mood.safetensors"  # saving reads it back too
    assert torch.equal(library.get("mood").W, mood.W)


def test_spill_counts_toward_the_limit_and_keeps_what_it_cannot_write(library, llama_lm, tmp_path, monkeypatch):
    s = Session()
    s.add(random_switch(llama_lm, seed=1, name="kept"), library)
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    assert s.spill(not_a_folder) == 0 and s.switches.keys() == {"kept"}  # cannot be written: it stays in memory
    assert s.spill(tmp_path, quota=1000) == 0 and s.switches.keys() == {"kept"}  # its 4 kB would pass the quota
    assert s.spill(tmp_path) == 1
    monkeypatch.setattr(session_module, "MAX_SESSION_SWITCHES", 2)
    s.add(random_switch(llama_lm, seed=2, name="second"), library)
    with pytest.raises(ValueError, match="already holds 2 switches"):  # the spilled one counts
        s.add(random_switch(llama_lm, seed=3, name="third"), library)


def test_an_unreadable_spilled_switch_is_dropped_with_a_clear_error_and_the_session_goes_on(library, llama_lm, tmp_path):
    s = Session()
    s.add(random_switch(llama_lm, seed=1, name="mood"), library)
    s.add(random_switch(llama_lm, seed=2, name="calm"), library)
    s.spill(tmp_path)
    damaged = s._spilled["mood"][0]
    damaged.write_bytes(b"\x00" * 16)  # damaged on disk
    with pytest.raises(ValueError, match="'mood' was moved to disk when its page closed and could not be read back .* so it is gone"):
        s.get("mood", library)
    assert not damaged.exists() and s.available(library) == ["alpha", "beta", "calm"]  # said once; the rest works
    assert torch.equal(s.get("calm", library).W, random_switch(llama_lm, seed=2).W)


def test_a_close_during_training_spills_when_the_run_ends(library, llama_lm, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    s = Session()
    s.add(random_switch(llama_lm, seed=1, name="mood"), library)
    flag = s.start_training()
    assert s.spill(spool) == 0 and "mood" in s.switches  # the run still writes its switch's card
    s.add(random_switch(llama_lm, seed=2, name="trained"), library)  # the run's switch
    s.end_training(flag)
    wait_for(lambda: s.switches == {} and len(list(spool.iterdir())) == 2, "the run's end to move both (on a thread of its own)")


def test_a_switch_saved_while_being_spilled_stays_in_the_library_only(library, llama_lm, tmp_path, monkeypatch):
    spool = tmp_path / "spool"
    spool.mkdir()
    s = Session()
    s.add(random_switch(llama_lm, seed=1, name="keeper"), library)
    real_save = library.save

    def save_while_spilling(name, switch):  # the page closes while the switch is being written to the library
        assert s.spill(spool) == 1
        return real_save(name, switch)

    monkeypatch.setattr(library, "save", save_while_spilling)
    s.save("keeper", library)
    assert list(spool.iterdir()) == [] and not s.full() and s.get("keeper", library) is library.get("keeper")


def test_a_session_let_go_of_takes_its_files_with_it(library, llama_lm, tmp_path):
    import gc

    s = Session()
    s.add(random_switch(llama_lm, seed=1, name="mood"), library)
    s.spill(tmp_path)
    assert len(list(tmp_path.glob("*.safetensors"))) == 1
    del s
    gc.collect()
    assert list(tmp_path.glob("*.safetensors")) == []


def test_the_meter_reads_the_named_switches_or_the_first_then_one_per_matrix_up_to_its_cap(library, llama_lm):
    """The Highlight tab and the MCP tool chose the meter's switches each in its own code."""
    session = Session()
    mine = random_switch(llama_lm, seed=7, name="mine")
    session.add(mine, library)
    session.add(load_switch(library.folder / "alpha.safetensors", llama_lm), library, name="alpha-copy")  # alpha's matrix again
    names = session.available(library)
    pick = session.meter_switches(library, first=mine)
    assert [s.name for s in pick.read] == ["mine", *[n for n in names if n not in ("mine", "alpha-copy")][:2]]
    assert "alpha-copy" not in pick.left_out and len(pick.read) + len(pick.left_out) == len(names) - 1  # one per matrix
    assert pick.same == {"alpha-copy": "alpha"}  # said, not dropped silently (the Highlight tab names it)
    named = session.meter_switches(library, ["beta", "mine"])
    assert [s.name for s in named.read] == ["beta", "mine"] and named.left_out == [] and named.same == {}
    with pytest.raises(ValueError, match="the meter reads at most 3 switches at once; got 4"):
        session.meter_switches(library, ["alpha", "beta", "mine", "alpha-copy"])
