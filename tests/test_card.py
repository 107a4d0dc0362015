"""The switch card: one schema for file and memory, typed training record, unknown keys kept."""

from __future__ import annotations

import pytest
import torch
from conftest import TRANSFER_RECORD as RECORD

from lmswitch import Switch, SwitchFileError, load_switch
from lmswitch.core.card import Card, TransferRecord


def test_flat_form_round_trips_and_unknown_keys_are_kept():
    flat = {"recommended_eps": 6, "dataset": "mine", "transfer": RECORD, "later": [1, {"a": None}]}
    card = Card.from_dict(flat)
    assert card.training is None and card.recommended_eps == 6.0 and card.transfer == TransferRecord(**RECORD)
    assert card.extra == {"dataset": "mine", "later": [1, {"a": None}]}
    assert card.to_dict() == {**flat, "recommended_eps": 6.0} and Card.from_dict(card.to_dict()) == card
    assert list(card["transfer"]) == list(RECORD)  # files rewrite unchanged
    assert card["later"] == [1, {"a": None}] and card.get("missing") is None and "dataset" in card and len(card) == 4


def test_the_transfer_record_is_typed_and_reads_older_files():
    card = Card.from_dict({"transfer": RECORD | {"later": 1}})
    assert card.transfer.scaled_eps == 2.0 and card.transfer.extra == {"later": 1} and card["transfer"]["later"] == 1
    # a record from before 2026-11-21 (ridge only, no method) and 2026-11-29 (no scaled ε): read, the scaled ε filled in
    old = {k: v for k, v in RECORD.items() if k not in ("method", "scaled_eps")} | {"ridge": 0.1}
    older = Card.from_dict({"transfer": old}).transfer
    assert older.method == "ridge" and older.ridge == 0.1 and older.scaled_eps == 2.0
    rewritten = Card.from_dict({"transfer": old}).to_dict()["transfer"]
    assert rewritten == old and list(rewritten) == list(old)  # the file rewrites unchanged: nothing filled in is written
    from lmswitch.core.transfer import strength_advice  # said of an older file as of a new one

    said = strength_advice(Switch(W=torch.zeros(4, 4), card={"transfer": old, "recommended_eps": 2.0}), "gemma")
    assert said == "Recommended ε the source's +4 × 0.5 = +2 (the same typical logit change); not probed, so it may read less well on gemma."
    partial = Card.from_dict({"transfer": {"anchors": 10}})  # not a whole record: nothing is invented
    assert partial.transfer is None and partial.extra == {"transfer": {"anchors": 10}}
    for key, bad in (("anchors", "many"), ("eps_scale", float("nan")), ("scaled_eps", True), ("eps_scale", None)):
        with pytest.raises(ValueError, match=f"card field 'transfer.{key}' must be a finite number"):
            Card.from_dict({"transfer": RECORD | {key: bad}})


def test_a_partial_training_record_stays_in_extra():
    card = Card.from_dict({"steps": 10, "lr": 0.01})  # not a whole record: nothing is invented
    assert card.training is None and card.extra == {"steps": 10, "lr": 0.01}


def test_unused_fields_are_those_the_run_did_not_use():
    from dataclasses import fields

    from lmswitch.core.card import TrainingRecord

    record = {f.name: 0 for f in fields(TrainingRecord)} | {"optimizer": "adam", "data_shape": "examples"}
    assert Card.from_dict(record).unused() == set()
    assert Card.from_dict(record | {"optimizer": "lbfgs-sampled"}).unused() == {"lr", "batch_tokens", "min_steps"}
    assert Card.from_dict(record | {"data_shape": ""}).unused() == {"data_shape"}  # an older card did not record it
    assert Card.from_dict({"note": 1}).unused() == set()


# --- the card: one schema, unknown keys kept ---------------------------------------------------


def test_a_training_record_says_its_run_in_one_phrase_with_or_without_a_held_out_split():
    from dataclasses import fields

    from lmswitch.core.card import TrainingRecord

    flat = {f.name: 0 for f in fields(TrainingRecord)} | {"steps": 60, "seconds": 3.14, "heldout_gain": 0.01234}
    lbfgs = Card.from_dict(flat | {"optimizer": "lbfgs-sampled"}).training
    assert lbfgs.summary() == "60 loss evaluations in 3.1 s; held-out gain +0.0123 nats/token"
    adam = Card.from_dict(flat | {"optimizer": "adam", "heldout_gain": None}).training  # (the report and the index crashed)
    assert adam.summary() == "60 steps in 3.1 s; no held-out split" and adam.step_unit == "steps"


def test_card_round_trips_through_the_file_and_keeps_unknown_keys(tmp_path, llama_lm):
    from lmswitch import train_switch
    from lmswitch.core.card import TrainingRecord
    from lmswitch.core.options import TrainConfig

    switch = train_switch(llama_lm, ["the happy and good one", "a warm kind smile"], ["the sad one", "the cold one"],
                          config=TrainConfig(steps=5))
    assert isinstance(switch.card, Card) and isinstance(switch.card.training, TrainingRecord)
    switch.card = switch.card.updated(recommended_eps=6, dataset="mine", future_field={"nested": [1, 2]})
    loaded = load_switch(switch.save(tmp_path / "s.safetensors"))
    assert loaded.card == switch.card and loaded.card.training == switch.card.training
    assert loaded.card.recommended_eps == 6.0 and loaded.card["future_field"] == {"nested": [1, 2]}
    assert loaded.card["heldout_gain"] == switch.card.training.heldout_gain  # flat access reads the same values
    assert dict(loaded.card) == switch.card.to_dict() and "training" not in loaded.header()["card"]


def test_a_malformed_card_is_a_clear_switch_file_error(tmp_path):
    with pytest.raises(SwitchFileError, match="malformed card.*recommended_eps"):
        Switch(W=torch.zeros(4, 4), card={"recommended_eps": "strong"})
    with pytest.raises(SwitchFileError, match="malformed card.*transfer"):
        Switch(W=torch.zeros(4, 4), card={"transfer": [1]})


def test_key_order_is_kept_so_files_and_json_rewrite_unchanged():
    flat = {"data": "x", "recommended_eps": 6.0, "direction": 1, "transfer": {"a": 1}, "z": 0}
    card = Card.from_dict(flat)
    assert list(card.to_dict()) == list(flat) and list(card.updated(new=1).to_dict()) == [*flat, "new"]


def test_fluent_range_is_typed_and_checked():
    card = Card.from_dict({"fluent_eps": [-6, 9]})
    assert card.fluent_eps == (-6.0, 9.0) and card.to_dict() == {"fluent_eps": [-6.0, 9.0]}
    for bad in ([1, 2], [-1], "wide", [-1, float("nan")]):
        with pytest.raises(ValueError, match="fluent_eps"):
            Card.from_dict({"fluent_eps": bad})


def test_calibration_sets_the_fluent_range_and_recommends_its_positive_end():
    card = Card.from_dict({"recommended_eps": 12.0, "note": "kept"})
    calibrated = card.calibrated(-6.0, 4.0)
    assert calibrated.fluent_eps == (-6.0, 4.0) and calibrated.recommended_eps == 4.0
    assert calibrated["recommended_eps_range"] == [-6.0, 4.0] and calibrated["note"] == "kept"
    assert calibrated.fluent_text == "-6 … +4" and card.fluent_text == ""
    assert card.calibrated(-6.0, 4.0, share=0.75).recommended_eps == 3.0  # recommended from inside a noisy limit
    with pytest.raises(ValueError, match="share must be in"):
        card.calibrated(-6.0, 4.0, share=0.0)
    nothing_positive = card.calibrated(-2.0, 0.0)  # no +ε was fluent: no recommendation (12 lies outside the range)
    assert nothing_positive.recommended_eps is None and nothing_positive.fluent_eps == (-2.0, 0.0)
    assert "recommended_eps" not in nothing_positive.to_dict() and nothing_positive["note"] == "kept"
    assert Card().calibrated(-2.0, 0.0).recommended_eps is None
    assert card.calibrated(-2.0, 2.0).fluent_row == [-2.0, -1.0, 0.0, 1.0, 2.0] and card.calibrated(0.0, 0.0).fluent_row == []


def test_a_failed_probe_is_typed_and_a_measured_range_clears_it():
    failed = Card.from_dict({"note": "kept"}).updated(calibration_error="RuntimeError: out of memory")
    assert failed.calibration_error == "RuntimeError: out of memory" and failed["calibration_error"] == failed.calibration_error
    assert Card.from_dict(failed.to_dict()) == failed and failed.extra == {"note": "kept"}
    measured = failed.calibrated(-2.0, 3.0)
    assert measured.calibration_error is None and "calibration_error" not in measured and measured["note"] == "kept"
    with pytest.raises(ValueError, match="card field 'calibration_error' must be a string; got int"):
        Card.from_dict({"calibration_error": 3})


def test_a_trainings_warnings_are_typed():
    card = Card.from_dict({"warnings": ["The text is probably in another language."], "note": 1})
    assert card.warnings == ("The text is probably in another language.",) and card["warnings"] == list(card.warnings)
    assert Card.from_dict(card.to_dict()) == card and "warnings" not in Card.from_dict({"warnings": []}).to_dict()
    for bad in ("one string", [3], {"a": "b"}):
        with pytest.raises(ValueError, match="card field 'warnings' must be a list of strings"):
            Card.from_dict({"warnings": bad})


def test_a_card_keeps_what_its_fluent_range_was_measured_on_and_drops_a_stale_record():
    probe = {"prompt_set": "neutral", "split": "dev", "prompts": 50, "samples": 5, "max_new_tokens": 40}
    measured = Card.from_dict({"note": "kept"}).calibrated(-2.0, 3.0, probe=probe)
    assert measured["fluent_eps_probe"] == probe and measured["note"] == "kept"
    assert Card.from_dict(measured.to_dict())["fluent_eps_probe"] == probe  # survives the flat form
    again = measured.calibrated(-1.0, 1.0)  # measured again by something that did not say how: no stale record
    assert "fluent_eps_probe" not in again and again.fluent_eps == (-1.0, 1.0)


def test_beyond_fluent_is_outside_the_measured_range_and_never_without_one():
    card = Card.from_dict({"fluent_eps": [-4, 2]})
    assert [card.beyond_fluent(e) for e in (-4.5, -4, 0, 2, 2.5, 400)] == [True, False, False, False, True, True]
    assert not Card().beyond_fluent(400)  # no probe: nothing to compare with (the CLI and the API say nothing)
