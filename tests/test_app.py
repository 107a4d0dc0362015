"""The functions behind the web app's widgets, called directly on a tiny model (no server, no browser)."""

from __future__ import annotations

import math
import os
import re
import tempfile
import threading
import time
from pathlib import Path

import gradio as gr
import pytest
import torch
from conftest import TRANSFER_RECORD, digest, random_switch, wait_for
from gradio.utils import get_upload_folder

import app
import lmswitch as ls
from lmswitch.lenses import svd
from lmswitch.serve.session import SETTLE, Session, SwitchLibrary
from lmswitch.webapp import files, steer
from lmswitch.webapp import lens as app_lens
from lmswitch.webapp import train as app_train
from lmswitch.webapp import widgets as app_widgets
from lmswitch.webapp.train import PROBING, READING
from lmswitch.webapp.widgets import PROVISIONAL_EPS, UNSAVED, measuring_note

PROMPT = "the happy one was"
GEN = dict(max_new_tokens=8, temperature=1.0, top_p=0.9, seed=3, chat=False)


def gen_args(**kw) -> list:
    o = {**GEN, **kw}
    return [o["max_new_tokens"], o["temperature"], o["top_p"], o["seed"], o["chat"]]


@pytest.fixture
def folder(tmp_path, llama_lm):
    """A library folder with two switches made for the tiny llama."""
    lib = tmp_path / "library"
    lib.mkdir()
    random_switch(llama_lm, seed=1, scale=30.0, name="alpha", positive_label="warm", negative_label="cold").save(lib / "alpha.safetensors")
    random_switch(llama_lm, seed=2, scale=30.0, name="beta", eps_range=(-40, 40)).save(lib / "beta.safetensors")
    return lib


@pytest.fixture
def backend(llama_lm, folder):
    return app.Backend.with_model(llama_lm, folder)


def final(stream) -> tuple:
    *_, last = list(stream)
    return last


# --- sliders and pickers --------------------------------------------------------------------


def test_sliders_show_library_then_session_switches(backend, llama_lm):
    session = Session()
    session.add(random_switch(llama_lm, seed=5, name="mine"), backend.library)
    updates = app.slot_updates(session, backend.library)
    assert len(updates) == app.MAX_SLOTS
    shown = [u for u in updates if u.visible]
    assert [u.label.split(":")[0] for u in shown] == ["alpha", "beta", "mine"]
    assert shown[0].label == "alpha: + → warm, − → cold"
    assert (shown[0].minimum, shown[0].maximum) == (-10.0, 10.0)  # at least ±10 ε0 units
    assert (shown[1].minimum, shown[1].maximum) == (-40.0, 40.0)  # wider when the switch recommends more
    assert all(u.visible is False for u in updates[3:])
    pickers = app.dropdown_updates(session, backend.library, [None, None, None, None, "beta", None, None])
    assert pickers[0].choices and [c[0] for c in pickers[0].choices] == ["alpha", "beta", "mine"]
    assert [p.value for p in pickers] == ["alpha", "alpha", "beta", "alpha", "beta", "alpha", "alpha"]
    calibrated = random_switch(llama_lm, seed=6, name="tuned")
    calibrated.card = calibrated.card.updated(fluent_eps=[-6.0, 4.0])
    session.add(calibrated, backend.library)
    [tuned] = [u for u in app.slot_updates(session, backend.library) if u.visible and u.label.startswith("tuned")]
    assert (tuned.minimum, tuned.maximum) == (-6.0, 4.0) and "Fluent ε -6 … +4" in tuned.info  # the calibrated range, said
    calibrated.description = "learned from one document"
    assert app_widgets.slider_info(calibrated).startswith("learned from one document. Fluent ε -6 … +4;")  # sentences, not run on
    # a long one is cut at a word and marked: a transferred shipped switch's ended "(transferred f. Fluent ε …"
    calibrated.description = ("Detoxification: positive ε makes text less toxic (civil), negative ε more toxic (the paper's "
                              "convention). (transferred from smollm2-135m)")
    assert app_widgets.slider_info(calibrated).startswith(calibrated.description + ". Fluent ε -6 … +4;")
    calibrated.description = "word " * 60
    assert app_widgets.slider_info(calibrated).startswith(f"{'word ' * 30}word … Fluent ε -6 … +4;")  # 160 characters


def test_page_load_reports_ready_and_skipped_files(llama_lm, folder):
    (folder / "broken.safetensors").write_bytes(b"not a switch at all")
    backend = app.Backend.with_model(llama_lm, folder)
    status, *rest = app.on_load(backend, Session(), *[None] * 7)
    assert "ready" in status and "skipped broken.safetensors" in status
    assert len(rest) == app.MAX_SLOTS + 7


def test_what_every_user_needs_is_read_in_the_background_as_a_model_is_served(make_lm, tmp_path, monkeypatch):
    """A user's first "what it learned" does not wait for the lenses' table of the words the model writes, nor the
    first training's fluency probe for the unsteered rows it compares with."""
    from lmswitch.harness import frontier

    monkeypatch.setenv("LMSWITCH_CACHE", str(tmp_path / "cache"))  # its reference states: not in the user's cache
    lm = make_lm("llama", seed=11)
    app.Backend.with_model(lm, tmp_path)
    wait_for(lambda: lm in svd._WRITTEN_CACHE and frontier._UNSTEERED.get(lm), "the background reading ahead")
    monkeypatch.setattr(svd, "_probability_sum", lambda *a: pytest.fail("read again"))
    assert svd.written_words(lm).shape == (lm.vocab_size,)
    evaluate = frontier.evaluate_settings
    sampled = []
    monkeypatch.setattr(frontier, "evaluate_settings", lambda lm, settings, *a: sampled.extend(settings) or evaluate(lm, settings, *a))
    frontier.calibrated_card(lm, random_switch(lm, seed=3))  # as the Train tab probes a new switch
    assert sampled and [] not in sampled  # the probe's unsteered rows were not sampled again


def test_loading_and_failed_model_give_readable_errors(folder):
    loading = app.Backend("tiny", folder)
    with pytest.raises(gr.Error, match="still loading"):
        loading.get(timeout=0)
    failed = app.Backend("no-such-model-anywhere", folder).load()
    assert failed.status()["ready"] is False and failed.error
    with pytest.raises(gr.Error, match="could not be loaded"):
        failed.get()


# --- steering ---------------------------------------------------------------------------------


def test_zero_eps_shows_the_base_model_exactly(backend, llama_lm):
    session = Session()
    steered, base, s_scores, b_scores, tokens = final(app.steer(backend, PROMPT, *gen_args(), session, 0.0, 0.0))
    expected = ls.generate(llama_lm, PROMPT, [], **GEN)[0]
    assert steered == base == expected
    assert s_scores == b_scores and "perplexity" in s_scores
    assert "sentiment −1 … +1" in s_scores and "toxicity 0 … 1" in s_scores and "lower is likelier" in s_scores  # its scales
    assert "Move a slider" in tokens


def test_steered_output_is_the_library_generation_and_unsteered_is_unchanged(backend, llama_lm):
    session = Session()
    alpha = backend.library.get("alpha")
    first = final(app.steer(backend, PROMPT, *gen_args(), session, 0.0, 0.0))
    moved = final(app.steer(backend, PROMPT, *gen_args(), session, 6.0, 0.0))
    assert moved[0] == ls.generate(llama_lm, PROMPT, [(alpha, 6.0)], **GEN)[0]
    assert moved[1] == first[1]  # same seed: the unsteered side does not move
    assert moved[0] != moved[1]  # a strong random switch changes the sample
    assert 'class="tok"' in moved[4] and "promoted here" in moved[4]
    again = final(app.steer(backend, PROMPT, *gen_args(), session, -6.0, 0.0))  # unsteered side comes from the session cache
    assert again[1] == first[1] and again[3] == first[3]


def test_the_same_request_again_is_answered_from_memory(backend):
    session = Session()
    first = list(app.steer(backend, PROMPT, *gen_args(), session, 6.0, 0.0))
    again = list(app.steer(backend, PROMPT, *gen_args(), session, 6.0, 0.0))  # e.g. a slider released where it was
    assert len(first) > 1 and len(again) == 1 and again[0] == first[-1]
    zero = list(app.steer(backend, PROMPT, *gen_args(), session, 0.0, 0.0))  # unsteered: its own entry, not the cached base text
    assert zero[-1][0] == zero[-1][1] == first[-1][1]
    assert len(list(app.steer(backend, PROMPT, *gen_args(), session, 0.0, 0.0))) == 1


def test_streaming_yields_growing_text_then_scores(backend):
    updates = list(app.steer(backend, PROMPT, *gen_args(), Session(), 6.0, 0.0))
    assert len(updates) >= 2
    texts = [u[0] for u in updates]
    assert all(texts[i + 1].startswith(texts[i]) for i in range(len(texts) - 1) if texts[i])
    assert updates[0][2] == app.PENDING and "generating" in updates[0][4]  # the previous text's scores are cleared at once
    assert all(isinstance(u[2], type(gr.skip())) for u in updates[1:-1])  # scores only at the end
    assert "sentiment" in updates[-1][2]


def test_a_newer_request_stops_the_older_one(backend):
    session = Session()
    older = app.steer(backend, PROMPT, *gen_args(max_new_tokens=40), session, 6.0, 0.0)
    next(older)  # streaming has started
    newer = final(app.steer(backend, PROMPT, *gen_args(max_new_tokens=40), session, -6.0, 0.0))
    assert newer[0]
    # stopped at its next token, with no more text: it ends on skips, because Gradio sends an event's last outputs again
    # as it completes, which put the older partial text back over the newer one's (a retyped prompt, in a browser)
    assert list(older) == [(gr.skip(),) * 5]


def test_a_finished_text_is_not_sent_again_over_a_newer_ones(backend):
    """An older request whose texts were done (here answered from memory) when a newer one came: it ends on skips, so
    the end of its event does not put its texts back over the newer ones (an older keystroke's text, on the Xeon). The
    newer one's texts wait for that end."""
    session, got = Session(), []
    final(app.steer(backend, PROMPT, *gen_args(), session, 6.0, 0.0))
    older = app.steer(backend, PROMPT, *gen_args(), session, 6.0, 0.0)
    assert "sentiment" in next(older)[2]  # its finished texts and scores
    newer = threading.Thread(target=lambda: got.append(final(app.steer(backend, PROMPT, *gen_args(), session, -6.0, 0.0))))
    newer.start()
    wait_for(lambda: len(session._running) == 2, "the newer request to start")
    time.sleep(0.5)
    assert newer.is_alive() and not got  # (its texts come from memory too, at once: they wait for the older event)
    assert list(older) == [(gr.skip(),) * 5]
    newer.join(timeout=60)
    assert got and got[0][0] and got[0][2] != gr.skip()
    assert list(app.steer(backend, PROMPT, *gen_args(), session, 6.0, 0.0))[-1][2] != gr.skip()  # not superseded: as before


def test_a_newer_requests_texts_come_after_the_end_of_an_older_event(backend):
    """An older request that finished just before a newer one came returns with its texts, and Gradio sends them again
    as its event ends; a newer request answered at once from memory sent its texts before that message on a slow machine
    (an older keystroke's text stayed under a retyped prompt, in CI). They now come a moment after that end."""
    session = Session()
    done = final(app.steer(backend, PROMPT, *gen_args(), session, 6.0, 0.0))
    ended = time.monotonic()
    assert final(app.steer(backend, PROMPT, *gen_args(), session, 6.0, 0.0)) == done  # from memory
    assert time.monotonic() - ended >= SETTLE


def test_sessions_are_private_and_concurrent_sessions_do_not_interfere(backend, llama_lm):
    mine, other = Session(), Session()
    private = random_switch(llama_lm, seed=9, scale=30.0, name="private")
    mine.add(private, backend.library)
    with pytest.raises(gr.Error, match="no switch named 'private'"):
        app.generate_api(backend, PROMPT, "private=5", *gen_args(), other)
    assert all("private" not in (u.label or "") for u in app.slot_updates(other, backend.library) if u.visible)

    alpha = backend.library.get("alpha")
    expected = {k: ls.generate(llama_lm, PROMPT, [(alpha, e)] if e else [], **{**GEN, "seed": k})[0] for k, e in enumerate([6.0, 0.0, -6.0, 3.0])}
    got: dict[int, str] = {}

    def work(k: int, eps: float) -> None:
        got[k] = final(app.steer(backend, PROMPT, *gen_args(seed=k), Session(), eps, 0.0))[0]

    threads = [threading.Thread(target=work, args=(k, e)) for k, e in enumerate([6.0, 0.0, -6.0, 3.0])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == expected


def test_generate_endpoint_takes_named_switches(backend, llama_lm):
    out = app.generate_api(backend, PROMPT, "alpha=6, beta=-2", *gen_args(), Session())
    alpha, beta = backend.library.get("alpha"), backend.library.get("beta")
    assert out["steered"] == ls.generate(llama_lm, PROMPT, [(alpha, 6.0), (beta, -2.0)], **GEN)[0]
    assert out["unsteered"] == ls.generate(llama_lm, PROMPT, [], **GEN)[0]
    assert out["setting"] == {"alpha": 6.0, "beta": -2.0}
    assert set(out["scores"]["steered"]) == {"sentiment", "toxicity", "perplexity", "tokens"}


def test_adaptive_strength_reaches_the_library_from_every_generation_endpoint(backend, llama_lm):
    alpha = backend.library.get("alpha")
    out = app.generate_api(backend, PROMPT, "alpha=6", *gen_args(), Session(), True)
    assert out["steered"] == ls.generate(llama_lm, PROMPT, [(alpha, 6.0)], adaptive=True, **GEN)[0]
    last = list(app.steer(backend, PROMPT, *gen_args(), Session(), 6.0, 0.0, *[0.0] * (app.MAX_SLOTS - 2), True))[-1]
    assert last[0] == out["steered"]  # the checkbox comes after the sliders
    plain = list(app.steer(backend, PROMPT, *gen_args(), Session(), 6.0, 0.0))[-1]  # without it (older scripts): off
    assert plain[0] == ls.generate(llama_lm, PROMPT, [(alpha, 6.0)], **GEN)[0]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda b, s: app.generate_api(b, PROMPT, "alpha=nan", *gen_args(), s), "finite"),
        (lambda b, s: app.generate_api(b, PROMPT, "alpha 5", *gen_args(), s), "name=eps"),
        (lambda b, s: app.generate_api(b, PROMPT, "alpha=1e9", *gen_args(), s), "eps"),
        (lambda b, s: app.generate_api(b, PROMPT, "", *gen_args(seed=-1), s), "seed"),
        (lambda b, s: app.generate_api(b, PROMPT, "", *gen_args(seed=float("nan")), s), "seed"),
        (lambda b, s: app.generate_api(b, PROMPT, "", *gen_args(top_p=-0.5), s), "top_p"),
        (lambda b, s: app.generate_api(b, PROMPT, "", *gen_args(max_new_tokens=None), s), "max new tokens is empty: give a number"),
        (lambda b, s: final(app.steer(b, PROMPT, *gen_args(), s, math.inf, 0.0)), "finite"),
        (lambda b, s: app.run_sweep(b, "alpha", "1, two", 2, PROMPT, *gen_args(), s), "numbers"),
        (lambda b, s: app.run_sweep(b, "nope", "", 2, PROMPT, *gen_args(), s), "no switch named"),
        (lambda b, s: app.run_sweep(b, "alpha", ",".join(["1"] * 15), 8, PROMPT, *gen_args(), s), "generations"),
        (lambda b, s: app.run_grid(b, "alpha", "alpha", "", "", 1, PROMPT, *gen_args(), s), "two different"),
        (lambda b, s: app.inspect_switch(b, "alpha", 0, 10, s), "dims"),
        (lambda b, s: app.run_highlight(b, "   ", None, "alpha", -4, 5, 1, s), "empty"),
        (lambda b, s: app.run_highlight(b, PROMPT, None, "alpha", 0, 5, 1, s), "non-zero"),
        (lambda b, s: app.run_highlight(b, PROMPT, None, "alpha", 4, 0, 1, s), "max_span"),
        (lambda b, s: app.run_highlight(b, "the one " * 3_000, None, "alpha", 4, 5, 1, s), "at most 20,000"),
    ],
)
def test_bad_inputs_give_readable_errors_and_the_app_keeps_working(backend, call, match):
    session = Session()
    with pytest.raises(gr.Error, match=match):
        call(backend, session)
    assert final(app.steer(backend, PROMPT, *gen_args(), session, 2.0, 0.0))[0]  # still works


# --- sweep and composition map ---------------------------------------------------------------


def test_sweep_is_one_row_per_eps_and_sample(backend, llama_lm):
    """Each row is the library's text at its ε and sample (seed + k), with the decoding options the page sent."""
    alpha = backend.library.get("alpha")
    fig, rows = app.run_sweep(backend, "alpha", "-6, 0, 6", 2, PROMPT, *gen_args(), Session())
    assert [r[0] for r in rows] == [-6.0, -6.0, 0.0, 0.0, 6.0, 6.0]
    for eps in (-6.0, 0.0, 6.0):
        assert [r[2] for r in rows if r[0] == eps] == ls.generate(llama_lm, PROMPT, [(alpha, eps)], samples=2, **GEN), eps
    assert list(fig.data[0].x) == [-6.0, 0.0, 6.0]
    options = {"adaptive": True, "best_of": 2, "guide": 1, "repeat_guard": False}  # (run_sweep's order)
    _, rows = app.run_sweep(backend, "alpha", "6", 1, PROMPT, *gen_args(), Session(), *options.values())
    assert rows[0][2] == ls.generate(llama_lm, PROMPT, [(alpha, 6.0)], **GEN, adaptive=True, best_of=2, repeat_guard=0)[0]


def test_composition_map_covers_the_grid(backend, llama_lm):
    fig, rows = app.run_grid(backend, "alpha", "beta", "-5, 5", "-5, 0, 5", 1, PROMPT, *gen_args(), Session())
    assert len(rows) == 6 and {(r[0], r[1]) for r in rows} == {(a, b) for a in (-5.0, 5.0) for b in (-5.0, 0.0, 5.0)}
    alpha, beta = backend.library.get("alpha"), backend.library.get("beta")
    assert all(r[3] == ls.generate(llama_lm, PROMPT, [(alpha, r[0]), (beta, r[1])], **GEN)[0] for r in rows)  # both applied
    heat = fig.data[0]
    assert list(heat.y) == [-5.0, 5.0] and list(heat.x) == [-5.0, 0.0, 5.0]
    assert len(heat.customdata) == 2 and len(heat.customdata[0]) == 3  # sample texts on hover


# --- training, saving, importing ---------------------------------------------------------------

POSITIVE = ["the happy joy was good", "she was kind and warm", "love and joy in the bright one", "a sweet smile for you",
            "we had a great good time", "the kind one was happy"]
NEGATIVE = ["the sad grief was bad", "he was cruel and cold", "hate and grief in the dark one", "a bitter frown for you",
            "we had an awful bad time", "the cruel one was sad"]


def train_args(**kw) -> list:
    o = dict(mode=app.MODES[2], name="mood", pos="happy", neg="sad", text_a="\n".join(POSITIVE), file_a=None, text_b="\n".join(NEGATIVE),
             file_b=None, steps=20, lr=1e-2, eps0=1e-3, rank=0, seed=0)
    o.update(kw)
    return [o["mode"], o["name"], o["pos"], o["neg"], o["text_a"], o["file_a"], o["text_b"], o["file_b"], o["steps"], o["lr"], o["eps0"],
            o["rank"], o["seed"]]


def run_training(backend, session, **kw) -> list:
    return list(app.train(backend, *train_args(**kw), session, *[None] * 7, progress=lambda *a, **k: None))


def test_the_train_report_flags_a_switch_that_may_not_generalise(llama_lm):
    """A one-article switch with a held-out gain of −0.004 was announced "✔ … is ready" above "Very little text … "."""
    record = {"n_positive": 40, "n_negative": 40, "graded_labels": False, "tokens_train": 2000, "tokens_heldout": 400, "steps": 50,
              "best_step": 50, "stopped_early": False, "lr": 0.01, "l2": 1.0, "seed": 0, "rank": None, "batch_tokens": 0, "min_steps": 0,
              "dummy_steer": True, "train_losses": [], "heldout_losses": [], "heldout_nll_with_switch": 3.2,
              "heldout_nll_without_switch": 3.25, "heldout_nll_reversed_switch": 3.3, "hidden_state_seconds": 0.1, "seconds": 1.0,
              "optimizer": "lbfgs"}
    enough = random_switch(llama_lm, seed=3, name="mood", card={**record, "heldout_gain": 0.05})
    thin = random_switch(llama_lm, seed=3, name="mood", card={**record, "tokens_train": 120, "heldout_gain": -0.004})
    assert app_train._report("mood", "mood", enough).startswith("### ✔ 'mood' is ready — its slider is in the Steer tab.")
    said = app_train._report("mood", "mood", thin)
    assert said.startswith("### ⚠ 'mood' is ready, but it may not generalise (see below) — its slider") and "Very little text" in said
    # a solver's switch with no held-out gain is not called weak (40 + 40 sentences at −0.334 rank 90% of unseen ones
    # right), but its headline read a plain ✔ above "explains held-out text no better than the model"
    flat = random_switch(llama_lm, seed=3, name="mood", card={**record, "heldout_gain": -0.5, "heldout_nll_reversed_switch": 3.2})
    said = app_train._report("mood", "mood", flat)
    assert said.startswith("### ⚠ 'mood' is ready, but held-out text fits it no better than the model alone (see below)")
    assert "explains held-out text no better than the model" in said


def test_training_adds_a_private_slider_and_a_downloadable_file(backend, llama_lm):
    session = Session()
    updates = run_training(backend, session)
    status, loss_fig, report, *rest = updates[-1]  # the switch is ready, with what it learned
    _, _, _, *shown = next(u for u in updates if u[0] == PROBING)  # its slider and the pickers came with what it learned
    sliders, pickers, download = shown[: app.MAX_SLOTS], shown[app.MAX_SLOTS : -2], rest[-2].value["path"]
    assert "'mood'" in report and "is ready" in report and "held-out gain" in report
    card = session.get("mood", backend.library).card
    assert card.fluent_eps[1] > 0 and f"{card.fluent_text}; recommended ε {card.recommended_eps:+g}." in report  # probed, and inside
    assert any("mood: + → happy, − → sad" == u.label for u in sliders if u.visible)
    assert pickers[3].value == "mood"  # the manage picker selects the new switch
    assert rest[-2].label == "Download mood.safetensors"
    assert len(loss_fig.data[0].y) == session.get("mood", backend.library).card["steps"]
    saved = ls.load_switch(download, llama_lm)
    assert torch.equal(saved.W, session.get("mood", backend.library).W)
    # written where Gradio keeps its copies: served from there, not copied again, and swept with them (--keep-files)
    assert Path(download).is_relative_to(get_upload_folder())
    assert "mood" not in backend.library.names()  # private until saved
    progress = [u[0] for u in updates[:-1] if "Training… step" in u[0]]  # live progress
    # the form asked for 20 at most; the solver may plan fewer and stop sooner: every count reads as a ceiling
    assert progress and all("(at most " in text for text in progress)
    assert int(progress[-1].split("at most ")[1].split(";")[0]) <= 20 and card["steps"] <= 20


def test_the_train_report_says_its_switch_was_deleted(backend, llama_lm):
    """The report said "'mood' is ready — its slider is in the Steer tab" above the row's "Deleted 'mood'". Deleted, it
    says so and keeps the rest as a record; saved (under a new name when another page took its name) it stays."""
    session = Session()
    report = run_training(backend, session)[-1][2]
    assert report.startswith("### ✔ 'mood' is ready") or report.startswith("### ⚠ 'mood' is ready")
    assert app_train.report_after_delete(session, report) == gr.skip()  # still this page's
    other = Session()
    other.add(random_switch(llama_lm, seed=61, name="mood"), backend.library)
    app.save_switch(backend, "mood", other, *[None] * 7)  # another page saves a 'mood' first: ours is saved as 'mood-2'
    app.save_switch(backend, "mood", session, *[None] * 7)
    assert session.reported == "mood-2" and app_train.report_after_delete(session, report) == gr.skip()  # saved, not gone
    app.delete_switch(backend, "mood-2", session, *[None] * 7)
    marked = app_train.report_after_delete(session, report)
    assert marked.startswith("### 🗑 'mood-2' was deleted: its slider has left the Steer tab.") and "is ready" not in marked
    assert marked.split("\n", 1)[1] == report.split("\n", 1)[1]  # its data and advice stay
    assert app_train.report_after_delete(session, marked) == gr.skip()  # once
    assert app_train.report_after_delete(Session(), "") == gr.skip()  # nothing trained, nothing reported


def test_a_switch_past_the_last_slider_is_not_said_to_have_one(backend, llama_lm):
    """The Steer tab draws the first 12 switches; a 13th trained or imported was announced "its slider is in the Steer
    tab", and the user looked for a slider that was not there. It is told where to steer it instead."""
    session = Session()
    for k in range(app.MAX_SLOTS - len(backend.library.names())):
        session.add(random_switch(llama_lm, seed=70 + k, name=f"s{k}"), backend.library)
    assert len(session.available(backend.library)) == app.MAX_SLOTS
    report = run_training(backend, session)[-1][2]
    assert "'mood' is ready" in report and "its slider is in the Steer tab" not in report
    assert f"the Steer tab has sliders for the first {app.MAX_SLOTS} switches, so it gets none" in report
    app.delete_switch(backend, "s0", session, *[None] * 7)  # a slider freed: the switch after it moves up
    assert app_widgets.where_to_steer(session, backend.library, "mood") == "its slider is in the Steer tab"


def test_the_train_tab_opens_as_its_mode_shows_it(backend):
    """The layout's first placeholders, box labels and side B are the ones a change to its first mode gives (they were
    written twice, once in the layout and once in train.mode_changed)."""
    blocks = list(app.build_app(backend).blocks.values())
    (mode,) = [b for b in blocks if isinstance(b, gr.Radio) and b.label == "what to learn from"]
    by_label = {b.label: b for b in blocks if isinstance(b, gr.Textbox)}
    by_id = {b.elem_id: b for b in blocks if isinstance(b, gr.Textbox) and b.elem_id}
    side_b, pos, neg, text_a, text_b = app_train.mode_changed(mode.value)
    assert by_label["positive label (+ε)"].placeholder == pos.placeholder and by_label["negative label (−ε)"].placeholder == neg.placeholder
    assert (by_id["text-a"].label, by_id["text-b"].label) == (text_a.label, text_b.label)
    column = by_id["text-b"].parent
    while not isinstance(column, gr.Column):  # (Gradio puts a Form between)
        column = column.parent
    assert column.visible == side_b.visible


def test_training_from_one_document_and_two_documents(backend, tmp_path):
    doc = tmp_path / "doc.html"
    doc.write_text("<html><body><p>" + " ".join(POSITIVE) + "</p><script>bad()</script></body></html>")
    session = Session()
    one = run_training(backend, session, mode=app.MODES[0], name="doc", pos="", neg=" ", text_a="", file_a=str(doc), text_b="", steps=5)
    assert "'doc'" in one[-1][2]
    two = run_training(backend, session, mode=app.MODES[1], name="ab", pos="", neg="", text_a=" ".join(POSITIVE),
                       text_b=" ".join(NEGATIVE), steps=5)
    assert "'ab'" in two[-1][2]
    assert session.get("doc", backend.library).card["n_negative"] == 0
    # blank labels are the data's, as the boxes' placeholders say for the mode (two documents pasted: not files)
    for name, mode in (("doc", app.MODES[0]), ("ab", app.MODES[1])):
        switch, (side_b, pos, neg, text_a, text_b) = session.get(name, backend.library), app_train.mode_changed(mode)
        assert (switch.positive_label, switch.negative_label) == (pos.placeholder.split(" (")[0], neg.placeholder.split(" (")[0])
        assert pos.placeholder.endswith(" (or the uploaded file's name)") == (mode == app.MODES[1])
        assert side_b.visible == (mode != app.MODES[0])
        assert pos.value == neg.value == ""  # labels typed for another mode ("pro-subsidy") go: this mode's show
        assert text_a.label == ("the document" if mode == app.MODES[0] else "document A")  # not "positive sentences…"
        assert (text_b.label == "document B") == (mode == app.MODES[1])
    assert [box.label for box in app_train.mode_changed(app.MODES[2])[3:]] == ["positive sentences, one per line",
                                                                               "negative sentences, one per line"]
    assert [session.get(n, backend.library).negative_label for n in ("doc", "ab")] == ["unlike the document", "document B"]
    # two uploaded documents with blank labels: the files' names, which say more than "document A" on a slider
    pro, con = tmp_path / "pro-tax.txt", tmp_path / "against the tax.md"
    pro.write_text(" ".join(POSITIVE))
    con.write_text(" ".join(NEGATIVE))
    run_training(backend, session, mode=app.MODES[1], name="files", pos="", neg=" ", text_a="", file_a=str(pro), text_b="",
                 file_b=str(con), steps=5)
    files = session.get("files", backend.library)
    assert (files.positive_label, files.negative_label, files.description) == ("pro-tax", "against the tax", "pro-tax (+) vs against the tax (−)")
    same = tmp_path / "again"  # one name on both sides would say nothing: the data's labels then
    same.mkdir()
    (same / "Pro-Tax.md").write_text(" ".join(NEGATIVE))
    run_training(backend, session, mode=app.MODES[1], name="same", pos="", neg="", text_a="", file_a=str(pro), text_b="",
                 file_b=str(same / "Pro-Tax.md"), steps=5)
    same_names = session.get("same", backend.library)
    assert (same_names.positive_label, same_names.negative_label) == ("document A", "document B")
    first = two[0]  # the second run's first message clears the first run's report and what it learned
    assert first[0] == "Encoding the text…" and first[2] == "" and first[-1] == "" and all(u == gr.skip() for u in first[3:-1])


@pytest.mark.parametrize(
    ("kw", "shown", "not_shown"),
    [
        (dict(), ["**Promotes** (toward *happy*)", "**Demotes** (toward *sad*)"], ["passages", "Style meter"]),
        (dict(mode=app.MODES[0], text_a=" ".join(POSITIVE), text_b=""), ["**Promotes**", "**Telling passages** (they read most toward", "The document measures ε"],
         ["Document B"]),
        (dict(mode=app.MODES[1], text_a=" ".join(POSITIVE), text_b=" ".join(NEGATIVE)),
         ["**Promotes**", "**Telling passages** (they read most toward", "Document A measures ε", "Document B measures ε"], []),
    ],
)
def test_training_shows_what_the_switch_learned(backend, kw, shown, not_shown, monkeypatch):
    monkeypatch.setattr("lmswitch.lenses.learned.encode_text", _out_of_memory)  # the documents are read from the training's pass
    session = Session()
    updates = run_training(backend, session, steps=5, **kw)
    reading, probing, last = updates[-3:]
    assert reading[0] == READING and all(u == gr.skip() for u in reading[1:])  # trained; nothing else changes yet
    assert probing[0] == PROBING and probing[1] == gr.skip()  # what it learned and the slider, while the range is probed
    assert last[0] == "Done." and "is ready" in last[2] and last[-1] == probing[-1]  # the last message holds everything
    assert all(s in last[-1] for s in shown), last[-1]
    assert not any(s in last[-1] for s in not_shown), last[-1]


def test_a_new_switch_is_steered_while_its_fluent_range_is_measured(backend, folder, llama_lm):
    """The slider comes with what the switch learned, before the fluent-range probe: until the range is measured it
    reaches the probe's first strength (the sweep's default ε too), and saving and downloading wait for the range (a
    saved card would lack it for good)."""
    session = Session()
    stream = app.train(backend, *train_args(steps=5), session, *[None] * 7, progress=lambda *a, **k: None)
    probing = next(u for u in stream if u[0] == PROBING)  # the probe starts once the page has this message
    status, _, report, *rest = probing
    [slot] = [u for u in rest[: app.MAX_SLOTS] if u.visible and u.label.startswith("mood:")]
    assert (slot.minimum, slot.maximum) == (-1.0, 1.0) and PROVISIONAL_EPS == 1.0
    assert slot.info.startswith(UNSAVED) and slot.info.endswith(measuring_note())
    assert "is ready" in report and measuring_note() in report and rest[app.MAX_SLOTS + 3].value == "mood"  # the manage picker
    out = app.generate_api(backend, PROMPT, "mood=1", *gen_args(), session)  # steered at once, at the slider's end
    assert out["steered"] == ls.generate(llama_lm, PROMPT, [(session.get("mood", backend.library), 1.0)], **GEN)[0]
    _, rows = app.run_sweep(backend, "mood", "", 1, PROMPT, *gen_args(max_new_tokens=2), session)
    assert sorted({row[0] for row in rows}) == pytest.approx([-1, -2 / 3, -1 / 3, 0, 1 / 3, 2 / 3, 1], abs=0.01)  # not ±10
    with pytest.raises(gr.Error, match="the fluent ε range of 'mood' is still being measured"):
        app.save_switch(backend, "mood", session, *[None] * 7)
    waiting = app_train.export_switch(backend, "mood", session)
    assert waiting.value is None and "once its range is measured" in waiting.label
    session.wide_sliders = True  # widened meanwhile: twice as far, and said so
    [slot] = [u for u in app.slot_updates(session, backend.library) if u.visible and u.label.startswith("mood:")]
    assert (slot.minimum, slot.maximum) == (-2.0, 2.0) and slot.info.endswith(measuring_note(wide=True)) and "±2" in slot.info
    session.wide_sliders = False
    last = list(stream)[-1]
    switch = session.get("mood", backend.library)
    card = switch.card
    # the pickers stay as the user left them, and the sliders' ranges come with the event after (values read first)
    sliders, pickers = last[3 : 3 + app.MAX_SLOTS], last[3 + app.MAX_SLOTS : 3 + app.MAX_SLOTS + 7]
    assert all(u == gr.skip() for u in [*sliders, *pickers[:3], *pickers[4:]]) and not session.measuring
    assert pickers[3].value == "mood" and last[-2].label == "Download mood.safetensors"  # the Train tab's own: the new switch
    assert ls.load_switch(last[-2].value["path"], llama_lm).card.fluent_eps == card.fluent_eps  # the download, with its range
    values = [0.0, 0.0, -1.0]  # the page's values, checked by Gradio against the ranges the page has (±1 for mood)
    [mood] = [u for u in steer.refresh_sliders(backend, session, *values) if u.visible and u.label.startswith("mood:")]
    assert card.fluent_eps and (mood.minimum, mood.maximum) == switch.slider_range() and mood.value == max(-1.0, mood.minimum)
    assert steer.refresh_sliders(backend, session, 0.0, 0.0, -99.0)[2].value == mood.minimum  # past the end: moved to it
    assert "being measured" not in mood.info
    assert "Saved 'mood'" in app.save_switch(backend, "mood", session, *[None] * 7)[0]
    assert ls.load_switch(folder / "mood.safetensors", llama_lm).card.fluent_eps == card.fluent_eps  # saved with its range


def _out_of_memory(*args, **kwargs):
    raise RuntimeError("out of memory")


def test_a_failed_summary_keeps_the_trained_switch(backend, monkeypatch):
    monkeypatch.setattr("lmswitch.webapp.train.what_was_learned", _out_of_memory)  # fault injection: the lenses themselves are tested for real
    session = Session()
    last = run_training(backend, session, steps=5)[-1]
    assert "Could not read what it learned (RuntimeError: out of memory); the switch is kept" in last[-1]
    assert last[0] == "Done." and "is ready" in last[2]
    assert "mood" in session.available(backend.library)


def test_a_stop_ends_background_work_at_its_next_pause_point(backend, llama_lm):
    """A training over MCP held the server's stop until Gradio gave up, 5 s later, and its client heard nothing: long
    work now ends at its next pause point once the server stops, saying why; interactive work is left to finish."""
    from lmswitch.core.pause import pause_point
    from lmswitch.webapp.backend import SERVER_STOPPING, ServerStopping, user_errors

    started = threading.Event()

    def long_work() -> None:
        started.set()
        while True:
            pause_point()
            time.sleep(0.01)

    threading.Thread(target=lambda: started.wait(30) and backend.stopping.set(), daemon=True).start()
    begun = time.monotonic()
    with pytest.raises(gr.Error, match=SERVER_STOPPING):  # as a tool's or a page's handler sees it
        user_errors(backend.run)(long_work, background=True)
    assert time.monotonic() - begun < 5
    assert backend.run(lambda: "answered") == "answered"  # interactive work is left alone
    with pytest.raises(ServerStopping):  # a real training, as the MCP tool runs it
        backend.run(ls.train_switch, llama_lm, POSITIVE, NEGATIVE, background=True)
    with pytest.raises(ServerStopping):  # and its probe: not a switch answered as trained with "probe failed" in its card
        backend.calibrated(llama_lm, random_switch(llama_lm, seed=3, name="late"))


def test_a_failed_probe_keeps_the_trained_switch(backend, monkeypatch):
    monkeypatch.setattr("lmswitch.webapp.backend.calibrate", _out_of_memory)  # fault injection: the probe itself is tested for real
    session = Session()
    last = run_training(backend, session, steps=5)[-1]
    assert last[0] == "Done." and "is ready" in last[2] and "probe failed (RuntimeError: out of memory)" in last[2]
    switch = session.get("mood", backend.library)
    assert switch.card.fluent_eps is None and switch.card["calibration_error"] == "RuntimeError: out of memory"


def test_a_failed_probe_keeps_the_transferred_switch_at_its_scaled_eps(backend, llama_lm, make_lm, monkeypatch):
    monkeypatch.setattr("lmswitch.webapp.steer.MIN_ANCHORS", 20)  # the tiny vocabularies share 42 words
    monkeypatch.setattr("lmswitch.webapp.backend.calibrate", _out_of_memory)  # fault injection: the probe is tested for real
    backend.add_model(make_lm("gpt2", hidden=24), "tiny-other")
    session = Session()
    report, _, _, *rest = final(app.run_transfer(backend, "alpha", "tiny-other", session, *[None] * 7))
    moved = session.get(f"alpha-to-{backend.model('tiny-other')[0].name}", backend.model("tiny-other")[1])
    assert "probe failed (RuntimeError: out of memory)" in report and moved.card.fluent_eps is None
    shown = [u for u in rest[: app.MAX_SLOTS] if u.visible]
    assert shown[0].value == moved.card.recommended_eps == moved.card["transfer"]["scaled_eps"]


def test_a_page_closed_after_training_keeps_the_switch(backend):
    """The switch is in the session as soon as training ends, before its summary and probe."""
    session = Session()
    stream = app.train(backend, *train_args(steps=5), session, *[None] * 7, progress=lambda *a, **k: None)
    assert any(update[0] == READING for update in stream)
    stream.close()  # the page goes away while "what it learned" is read
    assert "mood" in session.available(backend.library)
    assert app.cancel_training(session) == "No training is running in this session."


def test_a_cancel_during_the_probe_ends_it_within_a_pause_point(backend, monkeypatch):
    """The fluent-range probe has no cancel of its own: a cancel set while it runs ends it at its next pause point (a
    Train tab's Cancel said "Cancelling…" for the whole probe, over a minute on a busy server)."""
    from lmswitch.core.pause import pause_point
    from lmswitch.webapp import backend as backend_module

    def endless_probe(lm, switch, probe):
        while True:
            pause_point()
            time.sleep(0.01)

    monkeypatch.setattr(backend_module, "calibrate", endless_probe)
    lm, library = backend.get()
    switch = library.get("alpha")
    flag = threading.Event()
    threading.Timer(0.3, flag.set).start()
    start = time.monotonic()
    card = backend.calibrated(lm, switch, cancel=flag, cancelled="stopped here")
    assert card["calibration_error"] == "stopped here" and time.monotonic() - start < 5
    assert backend.run(lambda: "the compute thread goes on") == "the compute thread goes on"


def test_a_switch_probed_again_gets_its_range_without_a_second_probe(backend, monkeypatch):
    """A class moving the shipped switch to Gemma, one page each, waited for the same 12–21 s probe each time. Kept by
    what the probe reads: the same matrix under another name or card (a retraining's card differs in its timings) is
    not probed again, another matrix is; a failed probe is not kept."""
    from dataclasses import replace

    from lmswitch.webapp import backend as backend_module

    probed, real = [], backend_module.calibrate

    def counted(pause: float = 0.0):
        return lambda lm, switch, probe: probed.append(switch.name) or time.sleep(pause) or real(lm, switch, probe)

    monkeypatch.setattr(backend_module, "calibrate", counted())
    lm, library = backend.get()
    alpha = library.get("alpha")
    first = backend.calibrated(lm, alpha)
    assert first.fluent_eps is not None and probed == ["alpha"]
    again = backend.calibrated(lm, replace(alpha, name="another page's", card=alpha.card.updated(note="retrained")))
    assert again.fluent_eps == first.fluent_eps and again["note"] == "retrained" and probed == ["alpha"]  # its own card
    backend.calibrated(lm, random_switch(lm, seed=9, name="alpha"))  # another matrix
    transferred = alpha.card.updated(transfer=TRANSFER_RECORD)
    backend.calibrated(lm, replace(alpha, card=transferred))  # a transfer's probe
    assert probed == ["alpha"] * 3
    monkeypatch.setattr(backend_module, "calibrate", _out_of_memory)
    beta = library.get("beta")
    assert backend.calibrated(lm, beta)["calibration_error"] == "RuntimeError: out of memory"
    monkeypatch.setattr(backend_module, "calibrate", counted())
    assert backend.calibrated(lm, beta).fluent_eps is not None and probed[-1] == "beta"
    # pages asking at once: the later ones wait behind the first probe on the compute thread, then take its range
    slow = random_switch(lm, seed=10, name="slow")
    monkeypatch.setattr(backend_module, "calibrate", counted(pause=0.5))
    cards = []
    pages = [threading.Thread(target=lambda: cards.append(backend.calibrated(lm, replace(slow)))) for _ in range(3)]
    for page in pages:
        page.start()
        time.sleep(0.1)
    for page in pages:
        page.join()
    assert probed.count("slow") == 1 and len(cards) == 3 and cards[0] == cards[1] == cards[2]


def test_a_cancel_after_training_skips_the_reading_and_the_probe_and_keeps_the_switch(backend):
    session = Session()
    stream = app.train(backend, *train_args(steps=5), session, *[None] * 7, progress=lambda *a, **k: None)
    assert any(update[0] == READING for update in stream)
    assert app.cancel_training(session) == "Cancelling…"  # the run is still going: reading and probing come next
    *_, last = stream
    assert last[0] == "Done." and last[-1] == app_train.CANCELLED_READING and "Its fluent-range probe was cancelled" in last[2]
    assert session.get("mood", backend.library).card.fluent_eps is None  # not probed
    assert app.cancel_training(session) == "No training is running in this session."


def test_training_can_be_cancelled(backend):
    session = Session()
    stream = app.train(backend, *train_args(steps=5_000), session, *[None] * 7, progress=lambda *a, **k: None)
    next(stream)
    assert app.cancel_training(session) == "Cancelling…"
    last = list(stream)[-1]
    assert last[0].startswith("Cancelled after")
    assert session.available(backend.library) == ["alpha", "beta"]
    assert app.cancel_training(session) == "No training is running in this session."
    # cancelled once steps were shown, it says the total they said ("Cancelled after 10 of 200 steps" under "at most 60")
    stream = app.train(backend, *train_args(steps=5_000), session, *[None] * 7, progress=lambda *a, **k: None)
    shown = next(u[0] for u in stream if u[0].startswith("Training… step"))
    app.cancel_training(session)
    planned = shown.split("(at most ")[1].split(";")[0]
    assert int(planned) < 5_000 and re.fullmatch(rf"Cancelled after \d+ of at most {planned} steps; nothing was added\.", list(stream)[-1][0])


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(text_a=""), "positive list is empty"),
        (dict(text_a="only one line"), "the positive side is one text of 3 tokens; a switch needs at least 32 .* or give two "
                                        "or more example sentences a side"),
        (dict(name="../etc/passwd"), "switch names"),
        (dict(lr=float("nan")), "learning rate"),
        (dict(steps=2.5), "whole number"),
        (dict(steps=0), "steps must be an integer from 1"),
        (dict(steps=5001), "more than this server trains per request \\(5,000\\)"),
        (dict(mode="three documents"), "unknown training mode"),
        (dict(text_a="\n".join(["the happy one " * 20] * 2000)), "at most 400,000"),
        (dict(pos="x" * 81), "positive label has 81 characters"),
        (dict(neg=7), "negative label must be text"),
    ],
)
def test_bad_training_input_is_refused(backend, kw, match):
    """Refused with a toast and in the status line, which kept the last run's words (a new upload's "could not be read
    as a PDF" showed under an earlier click's "Not trained: … identical")."""
    session, updates = Session(), []
    with pytest.raises(gr.Error, match=match):
        for update in app.train(backend, *train_args(**kw), session, *[None] * 7, progress=lambda *a, **k: None):
            updates.append(update)
    assert updates[-1][0].startswith("Not trained: ") and re.search(match, updates[-1][0])  # (some after "Encoding the text…")
    # the last run's loss curve, report and what it learned go: beside "Not trained" they read as this click's
    last = [next(u[i] for u in reversed(updates) if u[i] != gr.skip()) for i in (1, 2, -1)]
    assert last == [None, "", ""] and all(u == gr.skip() for update in updates for u in update[3:-1])  # the sliders stay
    assert len(run_training(backend, session)) > 1  # the refused call left no training running in the session


def test_one_long_line_a_side_trains_as_on_the_command_line(backend):
    """The app refused fewer than 2 lines a side while the library and the CLI train on one text each that is long enough."""
    session = Session()
    updates = run_training(backend, session, text_a=" ".join(POSITIVE), text_b=" ".join(NEGATIVE))
    assert "is ready" in updates[-1][2] and session.get("mood", backend.library).card.training.n_positive == 1



def test_an_uploaded_file_past_the_apps_limit_is_refused_naming_that_limit(backend, tmp_path):
    """Past the library's 2,000,000 characters it was refused naming those, so a file split to 1.9 million was refused
    again; every upload past the tab's limit gets the tab's own message and advice."""
    for size in (150_000, 30_000):  # 2,250,000 and 450,000 characters
        big = tmp_path / "big.txt"
        big.write_text("the happy one. " * size, encoding="utf-8")
        with pytest.raises(gr.Error, match=r"the document \(big.txt\) has more than 400,000 characters; the app trains on at "
                                           r"most 400,000 \(about 100,000 tokens\) in all. Trim it, or train on the command line"):
            run_training(backend, Session(), mode=app.MODES[0], text_a="", file_a=str(big))


def test_input_refused_once_training_began_says_so_in_the_status(backend):
    """Two identical documents are refused by the trainer, after the panel said it was encoding: the status must not stay
    on "Encoding the text…" beside the error."""
    updates = []
    with pytest.raises(gr.Error, match="identical"):
        for update in app.train(backend, *train_args(mode=app.MODES[1], text_a=" ".join(POSITIVE), text_b=" ".join(POSITIVE)),
                                Session(), *[None] * 7, progress=lambda *a, **k: None):
            updates.append(update)
    assert updates[0][0] == "Encoding the text…" and updates[-1][0].startswith("Not trained:") and "identical" in updates[-1][0]
    assert updates[-1][1] is None  # the empty loss chart of "Encoding the text…" goes too


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [("data.txt", b"\x00\x01\x02binary", "binary"), ("empty.txt", b"", "empty"), ("big.exe", b"MZ", "unsupported"),
     ("scan.pdf", b"%PDF-1.4 garbage", "pdf")],
)
def test_bad_uploads_are_refused(backend, tmp_path, name, content, match):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(gr.Error, match=match):
        run_training(backend, Session(), file_a=str(path), text_a="")


def test_pasted_text_and_a_file_at_once_are_refused_not_one_dropped(backend, tmp_path):
    """Which one was meant is not known: reading the file alone dropped the 40 pasted lines without a word."""
    path = tmp_path / "tiny.txt"
    path.write_text("Hello there, what a lovely day.\nA kind and happy friend came by.")
    with pytest.raises(gr.Error, match="the positive list was given twice: pasted text and the file tiny.txt. Clear one"):
        run_training(backend, Session(), file_a=str(path))
    with pytest.raises(gr.Error, match="the text was given twice"):
        app.run_highlight(backend, "the cruel one was sad", str(path), "alpha", -4, 3, 2, Session())
    assert "is ready" in run_training(backend, Session(), file_a=str(path), text_a=" \n ", steps=2)[-1][2]  # a blank box is none


def test_an_upload_swept_from_the_server_asks_for_it_again(backend, tmp_path, llama_lm):
    """Gradio's copies of uploads are removed after --keep-files hours: a page that still names one gets told to upload
    it again, for a document and for a switch."""
    gone = str(tmp_path / "swept" / "article.txt")
    with pytest.raises(gr.Error, match="the positive list: the uploaded file is no longer on the server .* upload it again"):
        run_training(backend, Session(), file_a=gone, text_a="")
    with pytest.raises(gr.Error, match="the switch file: the uploaded file is no longer on the server"):
        app.import_switch(backend, str(tmp_path / "swept" / "x.safetensors"), Session(), *[None] * 7)


def test_files_are_kept_for_the_hours_asked_and_a_bad_value_is_refused(monkeypatch, capsys):
    assert app.parse_args([]).keep_files == app.KEEP_FILES_HOURS == 24
    monkeypatch.setenv("LMSWITCH_KEEP_FILES", "2")
    assert app.parse_args([]).keep_files == 2 and app.parse_args(["--keep-files", "0.25"]).keep_files == 0.25
    monkeypatch.setenv("LMSWITCH_KEEP_FILES", "")  # set but empty: the default, as for the other settings
    assert app.parse_args([]).keep_files == 24
    for bad in ("0", "-1", "nan", "inf", "1e306", "a day"):
        with pytest.raises(SystemExit):
            app.parse_args(["--keep-files", bad])
        assert f"expected a positive number of hours (e.g. 24 or 0.5); got {bad!r}" in capsys.readouterr().err
    monkeypatch.setenv("LMSWITCH_KEEP_FILES", "never")
    with pytest.raises(SystemExit):
        app.parse_args([])
    assert "got 'never' (--keep-files or LMSWITCH_KEEP_FILES)" in capsys.readouterr().err


def test_the_sweep_removes_old_files_and_goes_on_while_uploads_arrive(tmp_path, monkeypatch):
    """Old registered files go (a download's emptied folder too), a component's kept file and new files stay, and
    uploads registered while it runs (here: one at each removal) do not stop it; Gradio's own sweep walks the live set
    and ends for good on such a clash."""
    with gr.Blocks() as demo:
        kept_box = gr.File()
    export = tmp_path / "lmswitch-export-x" / "0123abcd"
    export.mkdir(parents=True)
    old = [tmp_path / f"old-{i}.txt" for i in range(20)] + [export / "mood.safetensors"]
    for f in old:
        f.write_text("x")
    kept = tmp_path / "kept.txt"
    kept.write_text("x")
    kept_box.keep_in_cache = {str(kept)}
    demo.upload_file_set.update(map(str, [*old, kept]))
    remove, arriving = os.remove, iter(range(10**6))

    def remove_while_uploading(path) -> None:
        demo.upload_file_set.add(str(tmp_path / f"arriving-{next(arriving)}.txt"))
        remove(path)

    monkeypatch.setattr(files.os, "remove", remove_while_uploading)
    time.sleep(0.05)
    assert files.sweep(demo, age=0.01) == len(old)
    assert not any(f.exists() for f in old) and not export.exists() and kept.exists()
    young = tmp_path / "young.txt"
    young.write_text("x")
    demo.upload_file_set.add(str(young))
    assert files.sweep(demo, age=3600) == 0 and young.exists()
    assert files.sweep(demo, age=-math.inf) == 1 and not young.exists() and kept.exists()  # at exit: all but the kept


def test_download_files_lie_in_the_folder_gradio_was_given_and_nowhere_near_its_default(tmp_path, monkeypatch):
    """With GRADIO_TEMP_DIR named (app.py names one), the download files are written inside it (Gradio serves them
    from there); without it (a backend used outside the app), they go to the system's temporary folder and Gradio's
    default folder is not made."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "named"))
    assert files.export_folder().parent == tmp_path / "named"
    monkeypatch.delenv("GRADIO_TEMP_DIR")
    assert files.export_folder().parent == tmp_path and not (tmp_path / "gradio").exists()


def test_save_to_library_never_overwrites(backend, folder, llama_lm):
    session = Session()
    session.add(random_switch(llama_lm, seed=7, name="keeper"), backend.library)
    before = digest(folder)
    keeper = next(u for u in steer.refresh_sliders(backend, session) if u.visible and u.label.startswith("keeper:"))
    assert keeper.info.startswith(UNSAVED)  # this page's alone: the page asks before it goes (layout.LEAVE_JS)
    assert "Saved 'keeper'" in app.save_switch(backend, "keeper", session, *[None] * 7)[0]
    slots = [u for u in steer.refresh_sliders(backend, session) if u.visible]  # as the page redraws them after a save
    assert "keeper:" in " ".join(u.label for u in slots) and not any(UNSAVED in (u.info or "") for u in slots)
    assert ls.load_switch(folder / "keeper.safetensors", llama_lm).name == "keeper"
    after_first = digest(folder)
    again = app.save_switch(backend, "keeper", session, *[None] * 7)  # a second click: said, not an error
    assert again[0] == "'keeper' is already in the library." and digest(folder)["keeper.safetensors"] == after_first["keeper.safetensors"]
    session.add(random_switch(llama_lm, seed=8, name="alpha"), backend.library)  # renamed: alpha-2
    assert "alpha-2" in session.available(backend.library)
    after = digest(folder)
    assert {k: v for k, v in after.items() if k in before} == before  # existing files untouched
    assert "keeper" in Session().available(backend.library)  # new sessions see it


def test_import_validates_the_file(backend, tmp_path, llama_lm, make_lm):
    session = Session()
    good = random_switch(llama_lm, seed=11, name="imported").save(tmp_path / "imported.safetensors")
    status, *rest = app.import_switch(backend, str(good), session, *["beta"] * 7)
    assert "Imported 'imported'" in status and any(u.visible and u.label.startswith("imported") for u in rest[: app.MAX_SLOTS])
    pickers = rest[app.MAX_SLOTS :]  # Save and the download (the Train tab's picker) take the new switch; the others stay
    assert pickers[app_widgets.MANAGE_PICKER].value == "imported" and [p.value for p in pickers].count("beta") == 6

    other_model = make_lm("gpt2", hidden=48)
    foreign = random_switch(other_model, seed=1, name="foreign").save(tmp_path / "foreign.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00" * 64)
    nan = random_switch(llama_lm, seed=1, name="nan")
    nan.W[0, 0] = float("nan")
    from safetensors.torch import save_file

    save_file({"W": nan.W}, tmp_path / "nan.safetensors", metadata={"format": "lmswitch", "switch": "{}"})
    (tmp_path / "notes.txt").write_text("not a switch")
    for path, match in [(foreign, "48 × 48"), (junk, "not a valid safetensors"), (tmp_path / "nan.safetensors", "NaN"),
                        (tmp_path / "notes.txt", "not a .safetensors")]:
        with pytest.raises(gr.Error, match=match):
            app.import_switch(backend, str(path), session, *[None] * 7)
    assert session.available(backend.library) == ["alpha", "beta", "imported"]
    # a switch named by a script, where names are free, comes in under a usable form of its name
    spaced = random_switch(llama_lm, seed=12, name="My Switch (v2)").save(tmp_path / "spaced.safetensors")
    assert "Imported 'My-Switch-v2'" in app.import_switch(backend, str(spaced), session, *[None] * 7)[0]
    assert session.available(backend.library)[-1] == "My-Switch-v2"


def test_import_refuses_an_empty_switch_stamps_one_without_a_model_and_says_where_anothers_goes(backend, tmp_path, llama_lm, make_lm):
    """An all-zero switch steers nothing (it was imported, and saved, spread to every page's meter); one without a
    fingerprint is stamped with the model it came into; one of another model the app serves is pointed to that model
    in the page (the message named the command line)."""
    session = Session()
    zeros = ls.Switch(W=torch.zeros(llama_lm.hidden_size, llama_lm.hidden_size), name="zeros").save(tmp_path / "zeros.safetensors")
    with pytest.raises(gr.Error, match=r"'zeros' is all zeros \(or too small to change anything\): it would not steer anything"):
        app.import_switch(backend, str(zeros), session, *[None] * 7)
    tiny = ls.Switch(W=random_switch(llama_lm, seed=13).W * 1e-30, name="tiny").save(tmp_path / "tiny.safetensors")
    with pytest.raises(gr.Error, match="'tiny' is all zeros"):  # a rounding's worth of a switch steers nothing either
        app.import_switch(backend, str(tiny), session, *[None] * 7)
    bare = ls.Switch(W=random_switch(llama_lm, seed=13).W, name="bare").save(tmp_path / "bare.safetensors")
    assert "Imported 'bare'" in app.import_switch(backend, str(bare), session, *[None] * 7)[0]
    assert session.get("bare", backend.library).model_fingerprint == llama_lm.fingerprint
    other = make_lm("gpt2", hidden=llama_lm.hidden_size)
    backend.add_model(other, "tiny-other")
    theirs = random_switch(other, seed=14, name="theirs").save(tmp_path / "theirs.safetensors")
    with pytest.raises(gr.Error, match="'theirs' was made for tiny-other, not .*: pick tiny-other in the Steer tab's model picker"):
        app.import_switch(backend, str(theirs), session, *[None] * 7)
    assert "zeros" not in session.available(backend.library) and "theirs" not in session.available(backend.library)


# --- inspect and highlight ------------------------------------------------------------------


def test_inspect_lists_each_directions_words_by_what_positive_eps_does(backend, llama_lm):
    """The table named its poles +u and −u (the decomposition's sign), marked the one raised at +ε with ▲ and said so
    again in a column of its own, and showed 6 words a pole whatever "words per pole" said: now a direction's words
    raised and lowered at +ε, as many as asked, its share of W and its agreement as percentages."""
    rows, spectrum, scatter, words = app.inspect_switch(backend, "alpha", 4, 7, Session())
    found = svd.svd_dimensions(llama_lm, backend.library.get("alpha"), dims=4, words=7)
    assert [r[0] for r in rows] == [1, 2, 3, 4]
    for r, d in zip(rows, found.dimensions, strict=True):
        assert r[3] == ", ".join(w.shown for w in d.promoted) and r[4] == ", ".join(w.shown for w in d.suppressed)
        assert len(d.promoted) == 7 and r[2] == f"{100 * d.share:.1f}%" and r[5] == f"{100 * d.agreement:.0f}%"
    assert [round(x, 3) for x in spectrum.data[0].y[:4]] == [r[1] for r in rows]
    assert len(scatter.data) >= 2 and len(words) == 7


def test_highlight_returns_spans_heatmap_and_meter(backend, llama_lm, monkeypatch):
    text = "the happy one was kind and the cruel one was sad"
    passes, body = [], llama_lm.final_hidden
    ids = llama_lm.tokenizer(text, add_special_tokens=False).input_ids
    monkeypatch.setattr(llama_lm, "final_hidden", lambda x, *a, **k: passes.append(x[0].tolist() == ids) or body(x, *a, **k))
    spans, heat, meter_fig, summary = app.run_highlight(backend, text, None, "alpha", -4, 3, 2, Session())
    assert sum(passes) == 1  # the spans and the meter read the text from one body pass (the backend reads ahead too)
    monkeypatch.undo()
    assert "".join(piece for piece, _ in spans) == text
    assert sum(label is not None for _, label in spans) >= 1
    assert all(-1 <= v <= 1 for _, v in heat)
    assert len(meter_fig.data) == 2 * 2  # a curve and a best-ε marker per switch
    lined, lined_heat, *_ = app.run_highlight(backend, text.replace(" and ", "\n\n"), None, "alpha", -4, 3, 2, Session())
    assert "".join(piece for piece, _ in lined) == text.replace(" and ", "\n\n")  # the spans keep the text's lines
    shown = "".join(w for w, _ in lined_heat)  # a line break shown as ↵ (drawn as is, an empty coloured box)
    assert shown.count("↵") == 2 and "\n" not in shown
    assert "Style meter" in summary and "alpha" in summary and "beta" in summary
    import re

    labels = {"alpha": ("warm", "cold"), "beta": ("positive", "negative")}
    shown = re.findall(r"\*\*(\w+)\*\*: best ε ([+-][\d.]+) → \*(\w+)\*", summary)
    assert len(shown) == 2 and all(abs(float(eps)) >= 0.1 for _, eps, _ in shown)
    assert all(side == labels[name][eps[0] == "-"] for name, eps, side in shown), shown  # the side of the ε shown
    direct = ls.highlight(llama_lm, backend.library.get("alpha"), text, eps=-4, max_span=3, n_spans=2)
    assert spans == direct.highlighted


# --- several models: the picker and the Transfer panel ------------------------------------------


def test_model_picker_and_transfer_steer_another_model(backend, llama_lm, make_lm, monkeypatch):
    monkeypatch.setattr("lmswitch.webapp.steer.MIN_ANCHORS", 20)  # the tiny vocabularies share 42 words
    other = make_lm("gpt2", hidden=24)
    backend.add_model(other, "tiny-other")
    session = Session()
    status, *rest = app.select_model(backend, "tiny-other", session, *[None] * 7)
    assert other.name in status and session.model == "tiny-other"
    assert rest[-1].value == backend.model_name and "tiny-other" not in rest[-1].choices  # the Transfer tab's target: another model
    assert not any(u.visible for u in rest[: app.MAX_SLOTS])  # the library's switches are made for the llama
    assert app.generate_api(backend, PROMPT, "", *gen_args(), session)["unsteered"] == ls.generate(other, PROMPT, [], **GEN)[0]
    with pytest.raises(gr.Error, match="no switch named 'alpha'"):
        app.generate_api(backend, PROMPT, "alpha=5", *gen_args(), session)

    app.select_model(backend, llama_lm.name, session, *[None] * 7)
    with pytest.raises(gr.Error, match=f"'alpha' already steers {llama_lm.name}, the model this page steers: pick another target model"):
        list(app.run_transfer(backend, "alpha", llama_lm.name, session, *[None] * 7))  # mapped onto itself, it read as another switch
    waiting, done = list(app.run_transfer(backend, "alpha", "tiny-other", session, *[None] * 7))
    assert waiting[0].startswith("⏳ Mapping 'alpha' onto tiny-other") and len(waiting) == len(done)  # what the wait is for
    report, pick, status, *rest = done
    moved_name = "alpha-to-" + other.name
    assert f"'{moved_name}' steers" in report and "R²" in report and pick.value == "tiny-other" and session.model == "tiny-other"
    assert rest[-1].value == backend.model_name and "tiny-other" not in rest[-1].choices  # the next target: not tiny-other itself
    shown = [u for u in rest[: app.MAX_SLOTS] if u.visible]
    moved = session.get(moved_name, backend.model("tiny-other")[1])
    assert [u.label.split(":")[0] for u in shown] == [moved_name]
    # its fluent range probed on the target: the slider spans it, at the recommended ε (0 when no +ε read fluently)
    assert moved.card.fluent_eps is not None and f"Fluent ε on {other.name}: {moved.card.fluent_text}" in report
    assert (shown[0].minimum, shown[0].maximum) == moved.slider_range() and shown[0].minimum <= shown[0].value <= shown[0].maximum
    assert shown[0].value == (moved.card.recommended_eps or 0.0) and f"its slider at ε {shown[0].value:+g}" in report
    steered = final(app.steer(backend, PROMPT, *gen_args(), session, 6.0))
    assert steered[0] == ls.generate(other, PROMPT, [(moved, 6.0)], **GEN)[0]
    assert steered[1] == ls.generate(other, PROMPT, [], **GEN)[0]
    with pytest.raises(gr.Error, match="unknown model"):
        app.select_model(backend, "no-such-model", session, *[None] * 7)


def test_a_model_loads_while_the_compute_thread_serves_other_users(backend, make_lm, monkeypatch):
    """Loading another model takes seconds (Gemma-3-270M ~6 s on 2 cores): it runs in the picking user's thread, so
    other users' generations go on meanwhile, and two sessions picking it at once load it once."""
    from concurrent.futures import ThreadPoolExecutor

    other, loads = make_lm("gpt2", hidden=24), []
    started, release = threading.Event(), threading.Event()

    def slow_load(name, dtype):
        loads.append(name)
        started.set()
        assert release.wait(30)
        return other

    monkeypatch.setattr("lmswitch.webapp.backend.load_model", slow_load)
    sessions = [Session(), Session()]
    with ThreadPoolExecutor(3) as pool:
        picks = [pool.submit(app.select_model, backend, "gemma3-270m", s, *[None] * 7) for s in sessions]
        assert started.wait(30)
        served = pool.submit(app.generate_api, backend, PROMPT, "", *gen_args(), Session())  # through the compute thread
        assert served.result(timeout=30)["unsteered"] == ls.generate(backend.lm, PROMPT, [], **GEN)[0]  # during the load
        assert not any(p.done() for p in picks)
        release.set()
        statuses = [p.result(timeout=30)[0] for p in picks]
    assert loads == ["gemma3-270m"] and backend.models["gemma3-270m"][0] is other
    assert all(other.name in status for status in statuses) and all(s.model == "gemma3-270m" for s in sessions)


def test_a_model_whose_layers_cannot_be_found_is_still_served(llama_lm, folder, monkeypatch):
    def unknown(self):
        raise ValueError("cannot find the decoder layers")

    monkeypatch.setattr(type(llama_lm), "decoder_layers", unknown)
    backend = app.Backend.with_model(llama_lm, folder)  # no pause points before its layers: its passes run whole
    assert backend.run(lambda: backend.lm is llama_lm)


def test_once_its_model_is_loaded_the_server_takes_what_it_holds_for_good_out_of_the_garbage_collector(backend):
    """A full collection scanning the model, the switches and the libraries' modules paused every user for ~0.25 s;
    frozen, they are not scanned again (``app.main`` runs this on a side thread once the model is loaded)."""
    import gc

    held = gc.get_freeze_count()
    try:
        app.freeze_when_loaded(backend)  # the backend is loaded: it returns at once
        assert gc.get_freeze_count() > held + 1000
    finally:
        gc.unfreeze()


# --- closed pages: their switches on disk, and Gradio's limit of sessions ---------------------------------


def test_a_closed_page_moves_its_switches_to_disk_and_a_session_gradio_drops_takes_its_files(backend, llama_lm, tmp_path,
                                                                                             monkeypatch):
    """A launched app (in this process, on the tiny model) and ``gradio_client``: a client that closes has its unsaved
    switches moved to disk; the same session coming back gets them back; when Gradio's limit of sessions (2 here)
    pushes a closed session out, its files go too."""
    import weakref

    from app_server import free_port
    from gradio_client import Client, handle_file

    monkeypatch.setenv("GRADIO_HEARTBEAT_INTERVAL", "0.2")  # a closed client is noticed within a fraction of a second
    demo = app.build_app(backend)
    (state,) = [b for b in demo.blocks.values() if isinstance(b, gr.State) and isinstance(b.value, Session)]
    spills: list[tuple[weakref.ref, int]] = []
    real_spill = Session.spill
    monkeypatch.setattr(Session, "spill", lambda self, folder: spills.append((weakref.ref(self), real_spill(self, folder))) or spills[-1][1])
    upload = random_switch(llama_lm, seed=9, name="mine").save(tmp_path / "mine.safetensors")
    port = free_port()
    demo.queue().launch(server_port=port, prevent_thread_lock=True, quiet=True, state_session_capacity=2)
    url = f"http://127.0.0.1:{port}"

    def session_of(client) -> Session:
        return demo.state_holder.session_data[client.session_hash].state_data[state._id]

    def generate(client, switches: str = "mine=5") -> str:
        return client.predict(prompt=PROMPT, switches=switches, max_new_tokens=6, seed=2, api_name="/generate")["steered"]

    def closed(client) -> tuple[Session, str]:
        """Import the switch, steer with it, close the client and wait for its session's spill: the session and the text."""
        client.predict(handle_file(str(upload)), api_name="/import_switch")
        text, session = generate(client), session_of(client)
        client.close()
        wait_for(lambda: any(ref() is session and moved == 1 for ref, moved in spills), "the closed session's spill")
        return session, text

    try:
        first = Client(url, verbose=False)
        kept, before = closed(first)
        assert kept.switches == {} and len(list(backend.spool_dir.iterdir())) == 1  # out of memory, on disk
        back = Client(url, verbose=False)
        back.session_hash = first.session_hash  # the same session, as after a dropped connection
        assert generate(back) == before and "mine" in kept.switches and list(backend.spool_dir.iterdir()) == []
        back.close()

        pushed = weakref.ref(closed(Client(url, verbose=False))[0])
        (spilled_file,) = backend.spool_dir.iterdir()
        for _ in range(2):  # two new sessions: the limit of 2 pushes the closed one out, and its file goes
            other = Client(url, verbose=False)
            generate(other, switches="alpha=5")
            other.close()
        wait_for(lambda: pushed() is None and not spilled_file.exists(), "the pushed-out session's file to go")
    finally:
        demo.close()


def test_a_closed_clients_generation_is_told_to_stop(backend, monkeypatch):
    """A launched app (in this process, on the tiny model): when a client goes away, the unload event sets its session's
    generation stop flag, so a long guided or best-of decode it started stops at its next piece (what a set flag does is
    tests/test_batcher.py's) instead of holding other users' compute to its end. Without a newer request, nothing else
    sets it."""
    from app_server import free_port
    from gradio_client import Client

    monkeypatch.setenv("GRADIO_HEARTBEAT_INTERVAL", "0.2")
    flags: list[threading.Event] = []
    real = Session.new_generation
    monkeypatch.setattr(Session, "new_generation", lambda self, *args: flags.append(real(self, *args)) or flags[-1])
    demo = app.build_app(backend)
    port = free_port()
    demo.queue().launch(server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        client = Client(f"http://127.0.0.1:{port}", verbose=False)
        client.predict(prompt=PROMPT, switches="alpha=5", max_new_tokens=4, seed=2, api_name="/generate")
        (flag,) = flags
        time.sleep(1.0)  # heartbeats go on while the client is open: the flag stays clear
        assert not flag.is_set()
        client.close()
        wait_for(flag.is_set, "the closed client's generation to be told to stop", timeout=30)
    finally:
        demo.close()


def test_the_app_refuses_a_missing_switch_folder_or_spool_folder_before_starting(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(SystemExit, match="switch folder .*missing does not exist"):
        app.main(["--switches", str(tmp_path / "missing")])
    for bad in (tmp_path / "missing", a_file):
        with pytest.raises(SystemExit, match=f"--spool-dir {bad} is not a folder this user can write to"):
            app.main(["--switches", str(tmp_path), "--spool-dir", str(bad)])


def test_the_session_state_is_never_an_event_output(backend):
    """Gradio expires a state an hour after an event last wrote it, even while its page is still open after a dropped
    connection; the app's Session must only ever be an input (closed pages are handled by Session.spill)."""
    demo = app.build_app(backend)
    (state,) = [b for b in demo.blocks.values() if isinstance(b, gr.State) and isinstance(b.value, Session)]
    assert any(state in fn.inputs for fn in demo.fns.values())
    assert not [fn.name for fn in demo.fns.values() if state in fn.outputs]


def test_highlight_meters_a_switch_imported_twice_once(backend, tmp_path):
    """A switch downloaded and imported again is in the session twice (``alpha-2``) with one matrix: the meter reads
    each matrix once (two equal switches have no joint best ε) instead of failing every highlight, and says so (it
    dropped the twin without a word)."""
    session = Session()
    again = backend.library.get("alpha").save(tmp_path / "alpha.safetensors")
    assert "Imported 'alpha-2'" in app.import_switch(backend, str(again), session, *[None] * 7)[0]
    *_, meter_fig, summary = app.run_highlight(backend, "the happy one was kind and the cruel one was sad", None, "alpha", -4, 3, 1,
                                                session)
    assert "**alpha**" in summary and "**beta**" in summary and "**alpha-2**" not in summary
    assert "- alpha-2: not read again, the same switch as **alpha**" in summary  # said, not left out silently
    assert len(meter_fig.data) == 2 * 2


def test_the_mcp_meter_names_the_switches_it_did_not_read(backend, llama_lm):
    """measure_style with no names reads one switch per matrix up to the cap; the ones it skipped were not said."""
    from lmswitch.webapp.mcp_tools import McpTools

    tools = McpTools(backend)
    tools.session.add(ls.load_switch(backend.library.folder / "alpha.safetensors", llama_lm), backend.library, name="alpha-copy")
    for seed in (10, 11):
        tools.session.add(random_switch(llama_lm, seed=seed, name=f"extra{seed}"), backend.library)
    result = tools.measure_style("the happy one was kind and the cruel one was sad", "")
    assert [r["name"] for r in result["switches"]] == ["alpha", "beta", "extra10"]
    assert result["not_read"] == {"alpha-copy": "the same switch as alpha", "extra11": "the meter reads at most 3 switches"}


def test_highlight_meters_the_picked_switch_when_the_session_has_more_than_the_meter_reads(backend, llama_lm, monkeypatch):
    """With more switches than the meter reads at once, the picked one is read first and the others left out are
    named (the meter read the first eight of the session and left the picked one out without a word)."""
    monkeypatch.setattr(app_lens, "MAX_METER_SWITCHES", 3)
    session = Session()
    for seed in range(10, 13):
        session.add(random_switch(llama_lm, seed=seed, name=f"extra{seed}"), backend.library)
    *_, meter_fig, summary = app.run_highlight(backend, "the happy one was kind and the cruel one was sad", None, "extra12", -4, 3, 1,
                                                session)
    read = summary.split("**Style meter**")[1]
    assert "**extra12**" in read and "**alpha**" in read and "**beta**" in read, read
    assert "not read (3 switches at most, the picked one first): extra10, extra11" in read, read
    assert len(meter_fig.data) == 3 * 2


def test_a_switch_whose_name_another_page_saved_meanwhile_is_saved_under_a_free_name(backend, folder, llama_lm):
    """Two pages train a switch with the default name; the first saves it. The second's Save used to answer "rename it
    before saving", with nothing in the page to rename it: it is saved as 'my-switch-2', its slider and pickers follow."""
    first, second = Session(), Session()
    mine = random_switch(llama_lm, seed=21, name="my-switch")
    assert first.add(random_switch(llama_lm, seed=20, name="my-switch"), backend.library) == "my-switch"
    assert second.add(mine, backend.library) == "my-switch"
    assert "Saved 'my-switch'" in app.save_switch(backend, "my-switch", first, *[None] * 7)[0]
    theirs = digest(folder)["my-switch.safetensors"]
    message, *pickers = app.save_switch(backend, "my-switch", second, *[None] * 3, "my-switch", *[None] * 3)
    assert "Saved 'my-switch' as 'my-switch-2' (another page saved a switch named 'my-switch' meanwhile)" in message, message
    assert pickers[3].value == "my-switch-2" and {"my-switch", "my-switch-2"} <= {c[0] for c in pickers[3].choices}
    assert digest(folder)["my-switch.safetensors"] == theirs  # the other page's file untouched
    assert torch.equal(ls.load_switch(folder / "my-switch-2.safetensors", llama_lm).W, mine.W)
    order = second.available(backend.library)
    assert order.index("my-switch-2") < order.index("my-switch")  # its slider kept its place; the library's comes after
    assert not second.unsaved("my-switch-2") and torch.equal(second.get("my-switch", backend.library).W,
                                                             backend.library.get("my-switch").W)  # the first page's


def test_the_meter_summary_reads_neither_way_at_a_best_eps_shown_as_zero():
    """It said "best ε +0.0 → formal (evidence 0.0 nats; weak)": the side of a sign too small to show."""
    from lmswitch.lenses.meter import MeterRow

    def row(eps: float) -> MeterRow:
        return MeterRow(name="formality", positive_label="formal", negative_label="informal", grid=[0.0], loglik=[0.0], best_eps=eps,
                        best_eps_alone=eps, evidence_nats=0.0, at_bound=False, label=None)

    assert app_lens._reading(row(0.04)) == "- **formality**: best ε +0.0 → *neither* (evidence 0.0 nats; weak)"
    assert app_lens._reading(row(-0.06)).startswith("- **formality**: best ε -0.1 → *informal*")


def test_delete_removes_what_this_page_made_and_keeps_the_file_in_the_trash(backend, folder, llama_lm):
    """There was no way to delete a switch. A page may delete what it made: an unsaved switch leaves it (no file is
    touched); one it saved leaves the library, its file moved to the folder's .trash (nothing is lost). The library's
    switches from before, and another page's, are everyone's: refused, naming the file to move by hand."""
    session, other = Session(), Session()
    session.add(random_switch(llama_lm, seed=31, name="draft"), backend.library)
    before = digest(folder)
    message, *pickers = app.delete_switch(backend, "draft", session, *["draft"] * 7)
    assert message == "Deleted 'draft' from this page (it was not saved)." and digest(folder) == before
    assert "draft" not in session.available(backend.library) and not any("draft" in {c[0] for c in p.choices} for p in pickers)
    assert [p.value for p in pickers] == [None] * 7  # left empty: not moved to a switch the user did not pick
    assert app_train.export_switch(backend, "", session).label == app_train.DOWNLOAD  # (it named the switch picked before)
    keeper = random_switch(llama_lm, seed=32, name="keeper")
    session.add(keeper, backend.library)
    app.save_switch(backend, "keeper", session, *[None] * 7)
    saved = digest(folder)["keeper.safetensors"]
    for page, name in ((other, "keeper"), (session, "alpha")):
        with pytest.raises(gr.Error, match=f"'{name}' was not saved from this page, so it stays for everyone who uses it; to "
                                           f"delete it, move its file {re.escape(str(folder / name))}.safetensors out"):
            app.delete_switch(backend, name, page, *[None] * 7)
    assert digest(folder) == {**before, "keeper.safetensors": saved}
    message = app.delete_switch(backend, "keeper", session, *[None] * 7)[0]
    trashed = folder / ".trash" / "keeper.safetensors"
    assert message == f"Deleted 'keeper' from the library: its file is now `{trashed}` (move it back into the library folder to have it again at the next start)."
    assert digest(folder) == {**before, ".trash/keeper.safetensors": saved}
    assert "keeper" not in other.available(backend.library) and "keeper" not in SwitchLibrary(llama_lm, folder).names()
    with pytest.raises(gr.Error, match="no switch named 'keeper' in this session or the library"):
        app.delete_switch(backend, "keeper", session, *[None] * 7)
    # the name is free again: saved and deleted once more, the trash keeps both files
    session.add(random_switch(llama_lm, seed=33, name="keeper"), backend.library)
    app.save_switch(backend, "keeper", session, *[None] * 7)
    app.delete_switch(backend, "keeper", session, *[None] * 7)
    assert sorted(set(digest(folder)) - set(before)) == [".trash/keeper-2.safetensors", ".trash/keeper.safetensors"]
    assert torch.equal(ls.load_switch(trashed, llama_lm).W, keeper.W)
    with pytest.raises(gr.Error, match="pick a switch to delete"):
        app.delete_switch(backend, None, session, *[None] * 7)


def test_a_page_follows_the_switches_another_page_saves_or_deletes(backend, llama_lm):
    """A page never learned that another page saved or deleted a switch: no slider for the new one, the header's count
    stale, the pickers offering a switch that was gone. Its timer asks every few seconds and then draws them again, each
    slider keeping its value; nothing is sent while nothing changed, nor before the page has loaded."""
    a, b = Session(), Session()
    pickers = ["alpha", "alpha", "beta", "alpha", "alpha", "beta", "alpha"]
    sliders = [0.5, -1.0, *[0.0] * (app.MAX_SLOTS - 2)]
    assert all(u == gr.skip() for u in steer.library_watch(backend, b, *sliders, *pickers))  # not loaded yet
    status, *_ = steer.on_load(backend, b, *pickers)
    assert "2 switches in" in status
    assert all(u == gr.skip() for u in steer.library_watch(backend, b, *sliders, *pickers))
    a.add(random_switch(llama_lm, seed=51, name="shared"), backend.library)
    assert all(u == gr.skip() for u in steer.library_watch(backend, b, *sliders, *pickers))  # unsaved: a's alone
    app.save_switch(backend, "shared", a, *[None] * 7)
    status, *rest, rewrite = steer.library_watch(backend, b, *sliders, *pickers)
    drawn, picked = rest[: app.MAX_SLOTS], rest[app.MAX_SLOTS :]
    assert rewrite == gr.skip()  # a new switch changes no text
    assert "3 switches in" in status and b.slots == ["alpha", "beta", "shared"]
    assert [u.value for u in drawn[:3]] == [0.5, -1.0, 0.0] and drawn[2].visible and drawn[2].label.startswith("shared:")
    assert [p.value for p in picked] == pickers and all("shared" in {c[0] for c in p.choices} for p in picked)
    assert all(u == gr.skip() for u in steer.library_watch(backend, b, *sliders, 0.0, *pickers))  # drawn: nothing more
    b_pickers = ["shared", *pickers[1:]]
    app.delete_switch(backend, "shared", a, *[None] * 7)  # a saved it, so a may delete it
    status, *rest, rewrite = steer.library_watch(backend, b, *sliders[:2], 1.5, *sliders[3:], *b_pickers)
    drawn, picked = rest[: app.MAX_SLOTS], rest[app.MAX_SLOTS :]
    assert isinstance(rewrite, float)  # 'shared' steered this page's texts at 1.5: they are written again without it
    assert "2 switches in" in status and b.slots == ["alpha", "beta"] and not drawn[2].visible
    assert [p.value for p in picked] == [None, *pickers[1:]]  # left empty, not moved to a switch nobody picked
    assert all("shared" not in {c[0] for c in p.choices} for p in picked)
    again = random_switch(llama_lm, seed=52, name="unused")  # deleted while its slider stood at 0: the texts stand
    a.add(again, backend.library)
    app.save_switch(backend, "unused", a, *[None] * 7)
    steer.library_watch(backend, b, *sliders, *b_pickers)
    app.delete_switch(backend, "unused", a, *[None] * 7)
    *_, rewrite = steer.library_watch(backend, b, *sliders, *b_pickers)
    assert rewrite == gr.skip() and b.slots == ["alpha", "beta"]


def test_a_slider_keeps_its_switch_when_another_page_deletes_one_drawn_before_it(backend, llama_lm):
    """Page B drew sliders for alpha, beta, gone, late; page A deleted 'gone'. B's values were paired with the library as
    it was at the request: 'late''s value went to nothing and 'gone''s to 'late', steering the wrong switch silently."""
    a, b = Session(), Session()
    a.add(random_switch(llama_lm, seed=41, name="gone"), backend.library)
    app.save_switch(backend, "gone", a, *[None] * 7)
    late = random_switch(llama_lm, seed=42, name="late")
    b.add(late, backend.library)
    steer.refresh_sliders(backend, b)  # as the page draws them on load
    assert b.slots == ["alpha", "beta", "gone", "late"]
    app.delete_switch(backend, "gone", a, *[None] * 7)
    assert app_widgets.slot_setting(b, backend.library, [0.0, 0.0, 0.0, 2.0]) == [(late, 2.0)]
    with pytest.raises(gr.Error, match="'gone' is no longer in the library \\(deleted from another page\\): its slider leaves this page"):
        final(app.steer(backend, PROMPT, *gen_args(), b, 0.0, 0.0, 2.0, 0.0))
    redrawn = steer.refresh_sliders(backend, b, 0.0, 1.0, 0.0, 2.0)  # after a save, say: each value stays with its switch
    assert b.slots == ["alpha", "beta", "late"] and [u.value for u in redrawn[:3]] == [0.0, 1.0, 2.0]
    assert app_widgets.slot_setting(b, backend.library, [0.0, 0.0, 2.0]) == [(late, 2.0)]
