"""Fuzz (issue 17): generated bad input thrown at every named endpoint of the web app, and cancels racing trainings.

The handlers are called the way Gradio calls them, but with the raw values a
script could send before any component's own checks: every answer must be a
result or a readable ``gr.Error``, never a crash; nothing may be written to the
switch library; the app must keep serving.
"""

from __future__ import annotations

import inspect
import string
import threading

import gradio as gr
import pytest
from conftest import digest, random_switch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import app
from lmswitch.serve.session import Session
from lmswitch.webapp.layout import build_app

MAX_ITEMS = 50  # streamed answers read per call


@pytest.fixture(scope="module")
def served(llama_lm, tmp_path_factory):
    folder = tmp_path_factory.mktemp("library")
    random_switch(llama_lm, seed=1, scale=30.0, name="alpha").save(folder / "alpha.safetensors")
    random_switch(llama_lm, seed=2, scale=30.0, name="beta").save(folder / "beta.safetensors")
    junk_file = tmp_path_factory.mktemp("uploads") / "junk.safetensors"
    junk_file.write_bytes(b"\x00\xff not a switch \xfe" * 10)
    backend = app.Backend.with_model(llama_lm, folder)
    endpoints = {f.api_name: f for f in build_app(backend).fns.values() if f.api_name and f.api_visibility == "public"}
    return backend, folder, endpoints, str(junk_file)


numbers = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
                    st.integers(0, 6), st.floats(-30, 30), st.text(max_size=8))
texts = st.one_of(st.none(), st.integers(), st.floats(allow_nan=True), st.lists(st.text(max_size=5), max_size=3),
                  st.text(max_size=60), st.text(alphabet=string.printable + "\x00\x07\x1b\ud7ff\ufffe", max_size=40),
                  st.sampled_from(["alpha", "alpha=5", "alpha=nan", "alpha=1e308", "alpha=5, alpha=-5", "../alpha", "/etc/passwd",
                                   "alpha.safetensors", "CON", "", " ", "a" * 5000, "x" * 500_000, "one document", "labelled sentences",
                                   "two documents (A vs B)", "the happy one was\nthe sad one was\nyes\nno"]))
flags = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5))


def strategy(component, junk_file: str):
    if isinstance(component, gr.State):
        return st.builds(Session)
    if isinstance(component, (gr.File, gr.UploadButton)):
        return st.one_of(st.none(), st.sampled_from(["/etc/passwd", "../../x", "", junk_file, "/nonexistent/x.pdf"]), st.integers())
    if isinstance(component, (gr.Slider, gr.Number)):
        return numbers
    if isinstance(component, gr.Checkbox):
        return flags
    return texts  # Textbox, Dropdown, Radio


GOOD = {  # values the endpoints accept, by widget label (small, so that a good call is quick on the tiny model)
    "switches": "alpha=5", "ε values": "-5, 0, 5", "ε values (rows)": "-5, 5", "ε values (columns)": "0, 5", "switch (columns)": "beta",
    "samples per ε": 1, "samples per cell": 1, "max new tokens": 6, "steps": 5, "target model": "tiny", "what to learn from": "labelled sentences",
    "positive sentences, one per line": "a happy day\na glad day\na warm day",
    "negative sentences, one per line": "a sad night\na grim night\na cold night", "name": "fuzzed",
    "text": "you are a happy and warm person, but that idea was awful",
}


# need a file, a session switch (to save, or to delete: the library's are not a page's to delete), or a second model:
# refused here
NEEDS_MORE = {"import_switch", "save_switch", "delete_switch", "transfer"}


def valid(component):
    """A value the endpoint accepts: :data:`GOOD`, else the widget's default, or a library switch for empty pickers."""
    if isinstance(component, gr.State):
        return Session()
    value = GOOD.get(getattr(component, "label", None), component.value)
    return "alpha" if isinstance(component, gr.Dropdown) and not value else value


def call(block_fn, args):
    out = block_fn.fn(*args)
    if inspect.isgenerator(out):
        for _, _item in zip(range(MAX_ITEMS), out, strict=False):
            pass
        out.close()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_every_named_endpoint_answers_bad_input_with_a_readable_error(served, data):
    backend, folder, endpoints, junk_file = served
    name = data.draw(st.sampled_from(sorted(endpoints)), label="endpoint")
    block_fn = endpoints[name]
    inputs = block_fn.inputs
    bad = data.draw(st.one_of(st.sets(st.integers(0, max(len(inputs) - 1, 0)), max_size=2), st.just(set(range(len(inputs))))),
                    label="bad inputs")  # one or two bad values among good ones, or all bad
    args = [data.draw(strategy(c, junk_file), label=getattr(c, "label", None) or type(c).__name__) if k in bad else valid(c)
            for k, c in enumerate(inputs)]
    before = digest(folder)
    try:
        call(block_fn, args)
    except gr.Error as err:
        assert str(err).strip()  # something the user can read
        assert bad or name in NEEDS_MORE, f"/{name} refused good input: {err}"  # the good values do get through
    assert digest(folder) == before  # nothing written to (or removed from) the library


def test_every_named_endpoint_is_fuzzed(served):
    _, _, endpoints, _ = served
    assert {"generate", "steer", "sweep", "compose", "train", "cancel_training", "save_switch", "delete_switch", "import_switch", "inspect",
            "highlight", "select_model", "transfer", "status"} <= set(endpoints)


def test_cancels_racing_trainings_and_generations_leave_every_session_consistent(served, llama_lm):
    """Eight users at once: four train and cancel at once (a cancel may come before the run starts or during it), two
    cancel with nothing running, two generate; every call ends with a result or a readable error, a cancelled training
    adds nothing, a finished one adds exactly its switch, and the app still answers."""
    backend, folder, endpoints, _ = served
    before = digest(folder)
    pos, neg = "\n".join(["a lovely happy day", "so glad and warm"] * 6), "\n".join(["a cold sad night", "grim and bitter"] * 6)
    outcomes: dict[int, str] = {}
    sessions = [Session() for _ in range(8)]
    errors: list[BaseException] = []

    def trainer(k: int) -> None:
        session = sessions[k]
        args = ["labelled sentences", f"mine{k}", "", "", pos, None, neg, None, 40, 0.01, 0.001, 0, k, session]
        stream = endpoints["train"].fn(*args)
        threading.Timer(0.01 * k, endpoints["cancel_training"].fn, args=(session,)).start()
        messages = [item[0] for item in stream if isinstance(item, tuple) and isinstance(item[0], str)]
        outcomes[k] = messages[-1] if messages else ""

    def canceller(k: int) -> None:
        for _ in range(5):
            assert "no training is running" in endpoints["cancel_training"].fn(sessions[k]).lower()

    def generator(k: int) -> None:
        for seed in range(3):
            endpoints["generate"].fn("the happy one was", "alpha=5", 6, 1.0, 0.9, seed, False, sessions[k], False)

    def guarded(fn, k):
        try:
            fn(k)
        except gr.Error:
            pass
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=guarded, args=(fn, k)) for k, fn in enumerate([trainer] * 4 + [canceller] * 2 + [generator] * 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a call never came back"
    assert not errors, errors
    assert set(outcomes) == {0, 1, 2, 3}
    for k in range(4):
        added = [n for n in sessions[k].order if n.startswith("mine")]
        assert added == ([] if "Cancelled" in outcomes[k] else [f"mine{k}"]), (k, outcomes[k], added)
    assert digest(folder) == before
    assert endpoints["generate"].fn("the happy one was", "alpha=5", 4, 1.0, 0.9, 0, False, Session(), False)["steered"]
