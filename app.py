"""lmswitch web app: drag ε sliders, train switches from text, look inside them, highlight styled spans.

A thin Gradio adapter over the ``lmswitch`` library: plain functions (widget values →
library call → display value), then the ``gr.Blocks`` layout, then ``launch()``.
Per-user state lives in a :class:`lmswitch.serve.session.Session` held by ``gr.State``;
the model and the shared switch folder live in a :class:`Backend` created by ``main``.

    python app.py [--host 127.0.0.1] [--port 7860] [--model smollm2-135m] [--switches pretrained_switches] [--share]
"""

from __future__ import annotations

import argparse
import functools
import html
import inspect
import json
import math
import os
import queue
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # offline: no telemetry calls

import gradio as gr  # noqa: E402

from lmswitch.core.generate import stream_rows  # noqa: E402
from lmswitch.core.models import DEFAULT_MODEL, LanguageModel, load_model  # noqa: E402
from lmswitch.core.steering import MAX_ABS_EPS  # noqa: E402
from lmswitch.core.switch import Switch, SwitchFileError, load_switch  # noqa: E402
from lmswitch.core.train import TrainingCancelled, data_advice, train_switch  # noqa: E402
from lmswitch.core.transfer import transfer  # noqa: E402
from lmswitch.harness import figures  # noqa: E402
from lmswitch.harness.evaluate import Protocol, evaluate_settings, text_scores  # noqa: E402
from lmswitch.io.documents import DocumentError, read_document, split_lines  # noqa: E402
from lmswitch.io.resources import examples_dir, shipped_switches_dir  # noqa: E402
from lmswitch.lenses.meter import MAX_SWITCHES as MAX_METER_SWITCHES  # noqa: E402
from lmswitch.lenses.meter import measure  # noqa: E402
from lmswitch.lenses.spans import highlight, token_changes  # noqa: E402
from lmswitch.lenses.svd import promoted_words, svd_dimensions, word_map  # noqa: E402
from lmswitch.serve.session import Session, SwitchLibrary, check_name, until  # noqa: E402

ROOT = Path(__file__).resolve().parent
ASSETS = ROOT / "assets"
DEFAULT_SWITCHES = shipped_switches_dir()
MAX_SLOTS = 12  # ε sliders shown in the Steer view (switches beyond that are usable in the other views)
MAX_ROWS = 96  # generations in one sweep / composition-map call
BUNDLED_MODELS = ("smollm2-135m", "gemma3-270m")  # offered by the model picker and the Transfer panel
MIN_ANCHORS = 200  # shared words a transfer needs (lmswitch.core.transfer's default)
MODES = ("one document", "two documents (A vs B)", "labelled sentences")
MAX_TRAIN_CHARS = 400_000  # ~100k tokens: trains in minutes on a CPU; bigger corpora belong to `python -m lmswitch train`
MAX_HIGHLIGHT_CHARS = 100_000  # ~25k tokens scored in windows
PENDING = "<small>generating… scores follow when the text is complete</small>"
STREAM_EVERY = 0.1  # seconds between streamed text updates (each costs the server and the browser a render)
TABLE_WORDS = 6  # words per pole in the SVD table (the word lists below it are longer)
USER_ERRORS = (ValueError, TypeError, SwitchFileError, DocumentError)


# --- backend: the model and the shared switch folder ------------------------------------
class Backend:
    """Loads the model in the background so the page can say so; then serves it to every session."""

    def __init__(self, model: str = DEFAULT_MODEL, switches: str | Path | None = DEFAULT_SWITCHES) -> None:
        self.model_name = model
        self.folder = Path(switches) if switches else None
        self.models: dict[str, tuple[LanguageModel, SwitchLibrary]] = {}
        self.error: str | None = None
        self.ready = threading.Event()
        self.export_dir = Path(tempfile.mkdtemp(prefix="lmswitch-export-"))
        # All model work runs on this one long-lived thread: on a few CPU cores, torch's OpenMP pools slow every
        # thread down once several threads have used them (40 tokens: 1.3 s on one thread, 1.8–2.3 s across threads).
        self.compute = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lmswitch-compute")

    @classmethod
    def with_model(cls, lm: LanguageModel, switches: str | Path | None) -> Backend:
        """A backend around an already loaded model (tests, notebooks)."""
        backend = cls(lm.name, switches)
        backend.add_model(lm)
        backend.ready.set()
        return backend

    def add_model(self, lm: LanguageModel, name: str | None = None) -> None:
        """Serve ``lm`` (already loaded) under ``name`` as well, with the folder's switches made for it."""
        self.models[name or lm.name] = (lm, SwitchLibrary(lm, self.folder))

    def start(self) -> Backend:
        self.compute.submit(self.load)
        return self

    def run(self, fn: Callable, *args, **kwargs):
        """``fn(*args, **kwargs)`` on the compute thread (directly when already there)."""
        if threading.current_thread().name.startswith("lmswitch-compute"):
            return fn(*args, **kwargs)
        return self.compute.submit(fn, *args, **kwargs).result()

    def load(self) -> Backend:
        try:
            self.add_model(load_model(self.model_name), self.model_name)
        except Exception as err:  # shown on the page instead of a dead app
            self.error = f"{type(err).__name__}: {err}"
        finally:
            self.ready.set()
        return self

    @property
    def lm(self) -> LanguageModel | None:
        """The model the app started with (None until it is loaded)."""
        return self.models[self.model_name][0] if self.model_name in self.models else None

    @property
    def library(self) -> SwitchLibrary | None:
        """The switch folder's switches for the model the app started with."""
        return self.models[self.model_name][1] if self.model_name in self.models else None

    def status(self) -> dict:
        return {"model": self.model_name, "ready": self.ready.is_set() and not self.error, "error": self.error,
                "switches": self.library.names() if self.library else [], "skipped": self.library.skipped if self.library else {},
                "folder": str(self.folder) if self.folder else None, "loaded_models": list(self.models)}

    def choices(self) -> list[str]:
        """The model picker's list: the bundled models and whatever else is loaded."""
        return list(dict.fromkeys([self.model_name, *BUNDLED_MODELS, *self.models]))

    def model(self, name: str) -> tuple[LanguageModel, SwitchLibrary]:
        """Model ``name`` and its switch library, loading it (on the compute thread) the first time."""
        self.get()
        if name not in self.models:
            if name not in self.choices():
                raise ValueError(f"unknown model {name!r}; choose one of {', '.join(self.choices())}")
            self.run(lambda: name in self.models or self.add_model(load_model(name), name))
        return self.models[name]

    def get(self, timeout: float | None = 300, session: Session | None = None) -> tuple[LanguageModel, SwitchLibrary]:
        """The session's model (default: the one the app started with) and its switch library; waits while it loads."""
        if not self.ready.wait(timeout):
            raise gr.Error(f"The model '{self.model_name}' is still loading; try again in a few seconds.")
        if self.error:
            raise gr.Error(f"The model could not be loaded ({self.error}); restart the app with another --model.")
        if session is not None and session.model and session.model in self.models:
            return self.models[session.model]
        return self.lm, self.library


def computed(fn: Callable) -> Callable:
    """Run a handler ``fn(backend, ...)`` on the backend's compute thread."""

    @functools.wraps(fn)
    def call(backend: Backend, *args, **kwargs):
        return backend.run(fn, backend, *args, **kwargs)

    return call


def user_errors(fn: Callable) -> Callable:
    """Turn the library's ordinary exceptions into readable ``gr.Error`` messages (also for generators)."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def stream(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except USER_ERRORS as err:
                raise gr.Error(str(err)) from None

        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as err:
            raise gr.Error(str(err)) from None

    return call


# --- display helpers ----------------------------------------------------------------------
def slider_range(switch: Switch) -> tuple[float, float]:
    """At least −10…+10 ε0 units, wider when the switch recommends more."""
    lo, hi = switch.eps_range
    r = float(math.ceil(max(10.0, abs(lo), abs(hi))))
    return -r, r


def slider_label(switch: Switch) -> str:
    return f"{switch.name}: + → {switch.positive_label}, − → {switch.negative_label}"


def slot_updates(session: Session, library: SwitchLibrary, *, reset: bool = False, values: dict[str, float] | None = None) -> list:
    """One update per slider slot: the session's switches for this model in their stable order, then hidden slots.

    ``reset`` puts every slider back to 0 (another model's switches now fill the slots); ``values`` sets some.
    """
    names = session.available(library)[:MAX_SLOTS]
    values = values or {}
    updates = []
    for i in range(MAX_SLOTS):
        if i < len(names):
            switch = session.get(names[i], library)
            lo, hi = slider_range(switch)
            extra = {"value": values.get(names[i], 0.0)} if reset or names[i] in values else {}
            updates.append(gr.Slider(minimum=lo, maximum=hi, label=slider_label(switch), visible=True, info=switch.description[:120] or None,
                                     **extra))
        else:
            updates.append(gr.Slider(visible=False, value=0.0) if reset else gr.Slider(visible=False))
    return updates


# first choice of each switch picker (sweep, composition rows, composition columns, manage, inspect, highlight, transfer):
# a preferred name, else the switch in that slot
PICKER_DEFAULTS = (("sentiment", 0), ("sentiment", 0), ("detox", 1), (None, 0), ("sentiment", 0), ("detox", 0), ("sentiment", 0))


def dropdown_updates(session: Session, library: SwitchLibrary, values: Sequence[str | None]) -> list:
    """Switch pickers of the other views, keeping each current choice when it still exists."""
    names = session.available(library)
    out = []
    for value, (preferred, slot) in zip(values, PICKER_DEFAULTS, strict=True):
        if value not in names:
            value = preferred if preferred in names else names[min(slot, len(names) - 1)] if names else None
        out.append(gr.Dropdown(choices=names, value=value))
    return out


def format_scores(scores: dict) -> str:
    ppl = scores.get("perplexity")
    ppl_text = "–" if ppl is None else f"{ppl:.1f}"
    return (f"sentiment **{scores['sentiment']:+.2f}** · toxicity **{scores['toxicity']:.2f}** · "
            f"perplexity **{ppl_text}** <small>(vader, profanity-check, unsteered model; {scores['tokens']} tokens)</small>")


def token_html(changes: list[dict] | None, pending: bool = False) -> str:
    """Steered tokens coloured by how much the switches raised (green) or lowered (red) them; alternatives on hover."""
    if pending:
        return '<div class="tokens empty">generating…</div>'
    if not changes:
        return '<div class="tokens empty">Move a slider away from 0 to see which tokens the switches changed.</div>'
    parts = []
    for t in changes:
        d = t["delta"]
        alpha = min(abs(d) / 3.0, 1.0) * 0.65
        colour = f"rgba(22,163,74,{alpha:.2f})" if d > 0 else f"rgba(220,38,38,{alpha:.2f})"
        if t["scored"]:
            up = ", ".join(f"{a['token']!r} {a['delta']:+.2f}" for a in t["promoted"])
            down = ", ".join(f"{a['token']!r} {a['delta']:+.2f}" for a in t["demoted"])
            tip = (f"Δ log p {d:+.2f} (steered {t['logp_steered']:.2f}, unsteered {t['logp_base']:.2f})\n"
                   f"promoted here: {up}\ndemoted here: {down}")
        else:
            tip = "not scored (no context before it)"
        parts.append(f'<span class="tok" style="background:{colour}" title="{html.escape(tip)}">{html.escape(t["text"])}</span>')
    legend = ('<div class="legend"><span class="tok" style="background:rgba(22,163,74,.55)">raised</span> '
              '<span class="tok" style="background:rgba(220,38,38,.55)">lowered</span> by the switches · hover a token for the '
              'alternatives they promoted and demoted most at that step</div>')
    return f'<div class="tokens">{"".join(parts)}</div>{legend}'


def parse_eps_list(text: str | None, switch: Switch, count: int) -> list[float]:
    """``"-10, -5, 0, 5, 10"`` → floats; empty → ``count`` values over the switch's slider range."""
    if text is None or not str(text).strip():
        lo, hi = switch.eps_range
        return [round(lo + (hi - lo) * i / (count - 1), 2) for i in range(count)]
    try:
        values = [float(v) for v in str(text).replace(";", ",").split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"ε values must be numbers separated by commas, like -10, -5, 0, 5, 10; got {text!r}") from None
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError(f"give finite ε values separated by commas; got {text!r}")
    if len(values) > 15:
        raise ValueError(f"at most 15 ε values; got {len(values)}")
    return values


def parse_switch_values(text: str | dict | None) -> list[tuple[str, float]]:
    """``"sentiment=5, detox=-2"`` (or ``{"sentiment": 5}``) → name/ε pairs."""
    if not text:
        return []
    if isinstance(text, dict):
        items = list(text.items())
    else:
        items = []
        for part in str(text).split(","):
            if not part.strip():
                continue
            name, sep, value = part.partition("=")
            if not sep:
                raise ValueError(f"write switches as name=eps, separated by commas (e.g. sentiment=5, detox=-2); got {part.strip()!r}")
            items.append((name.strip(), value.strip()))
    out = []
    for name, value in items:
        try:
            eps = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"the ε of '{name}' must be a number; got {value!r}") from None
        out.append((name, eps))
    return out


def generation_options(max_new_tokens, temperature, top_p, seed, chat) -> dict:
    """Widget values → keyword arguments of the library's generators (which validate the ranges)."""
    seed = _number(seed, "seed", int)
    if seed < 0:
        raise ValueError(f"seed must be a whole number ≥ 0; got {seed}")
    return {"max_new_tokens": _number(max_new_tokens, "max new tokens", int), "temperature": _number(temperature, "temperature"),
            "top_p": _number(top_p, "top-p"), "seed": seed, "chat": bool(chat)}


def _number(value, label: str, kind: type = float):
    """A finite number from a widget (Gradio gives None for an emptied number box)."""
    if value is None or not math.isfinite(float(value)):
        raise ValueError(f"{label} needs a finite number; got {value!r}")
    if kind is int and float(value) != int(value):
        raise ValueError(f"{label} must be a whole number; got {value}")
    return kind(value)


def checked_setting(session: Session, library: SwitchLibrary, pairs: Sequence[tuple[str, float]]) -> list[tuple[Switch, float]]:
    out = []
    for name, eps in pairs:
        if eps is None or not math.isfinite(float(eps)):
            raise ValueError(f"the ε of '{name}' must be a finite number; got {eps!r}")
        if eps:
            out.append((session.get(name, library), float(eps)))
    return out


# --- Steer ----------------------------------------------------------------------------------
def model_status(backend: Backend, session: Session) -> str:
    lm, library = backend.get(session=session)
    skipped = "".join(f"<br>⚠ skipped {name}: {why}" for name, why in library.skipped.items())
    others = f" ({len(library.other_models)} more for other models)" if library.other_models else ""
    return (f"**{lm.name}** ready · {len(library.names())} switches in `{library.folder or 'no folder'}`{others} · "
            f"drag a slider and release it to regenerate{skipped}")


def on_load(backend: Backend, session: Session, *current: str | None):
    """Page load: wait for the model, then show this session's sliders and switch pickers."""
    _, library = backend.get(timeout=900)
    return [model_status(backend, session), *slot_updates(session, library), *dropdown_updates(session, library, current)]


@user_errors
@computed
def select_model(backend: Backend, name: str, session: Session, *current: str | None):
    """The model picker: steer another model (loaded the first time, converted and cached like the default one)."""
    _, library = backend.model(name)
    session.model = name
    return [model_status(backend, session), *slot_updates(session, library, reset=True), *dropdown_updates(session, library, current)]


@user_errors
@computed
def run_transfer(backend: Backend, name: str, target: str, session: Session, *current: str | None):
    """Map a switch to another model (``Hᵀ W H``), keep it in this session, and steer the target model with it."""
    source_lm, source_library = backend.get(session=session)
    switch = session.get(name, source_library)
    target_lm, target_library = backend.model(target)
    moved = transfer(switch, source_lm, target_lm, min_anchors=MIN_ANCHORS)
    final = session.add(moved, target_library)
    session.model = target
    t, r = moved.card["transfer"], moved.card["recommended_eps"]
    report = (f"### ✔ '{final}' steers {target_lm.name}: the Steer tab now uses {target}, its slider at ε {r:+g}\n"
              f"Map fitted on {t['anchors']} words both vocabularies share (e.g. {', '.join(t['example_anchors'][:6])}); on "
              f"{t['heldout_anchors']} held-out words R² {t['heldout_r2']} and a mapped word's nearest source word is itself "
              f"{t['heldout_top1']:.1%} of the time. Recommended ε {r:+g} = the source's {t['source_recommended_eps']:+g} × "
              f"{t['eps_scale']} (same typical logit change).")
    return [report, gr.Dropdown(choices=backend.choices(), value=target), model_status(backend, session),
            *slot_updates(session, target_library, reset=True, values={final: r}), *dropdown_updates(session, target_library, current)]


def _steer_setting(session: Session, library: SwitchLibrary, eps: Sequence[float]) -> list[tuple[Switch, float]]:
    names = session.available(library)[:MAX_SLOTS]
    return checked_setting(session, library, list(zip(names, eps, strict=False)))


def _stream(backend: Backend, prompt: str, setting, options: dict, session: Session, changes: bool = True) -> Iterator[tuple]:
    """Stream the steered and the unsteered output side by side (one batched call, same seed).

    Yields ``(steered, unsteered, None, None)`` per token, then once more with both
    outputs' scores and the steered tokens' changes. A newer request from the same
    session stops this one at its next token (and nothing more is yielded).
    """
    lm, _ = backend.get(session=session)
    flag = session.new_generation()
    key = (lm.fingerprint, prompt, *sorted(options.items()))
    full_key = ("result", *key, *((s.name, id(s), e) for s, e in setting))
    done = session.recall(full_key)
    if done and (done[3] is not None or not (changes and setting and done[0])):  # the same request again (a slider released in place)
        yield done
        return
    cached = session.recall(key) if setting else None  # moving a slider does not change the unsteered output
    rows = [setting] if cached else [setting, []] if setting else [[]]
    texts = ["", ""]
    for texts in until(flag, stream_rows(lm, prompt, rows, executor=backend.compute, **options)):
        yield texts[0], cached[0] if cached else texts[-1], None, None
    if flag.is_set():
        return
    if cached:
        steered, (base, base_scores) = texts[0], cached
        steered_scores = backend.run(text_scores, lm, prompt, [steered], chat=options["chat"])[0]
    else:
        steered, base = texts[0], texts[-1]
        scores = backend.run(text_scores, lm, prompt, [steered, base] if setting else [base], chat=options["chat"])
        steered_scores, base_scores = scores[0], scores[-1]
        session.remember(key, (base, base_scores))
    per_token = (backend.run(token_changes, lm, setting, steered, prompt=prompt, chat=options["chat"])
                 if changes and setting and steered else None)
    result = (steered, base, (steered_scores, base_scores), per_token)
    session.remember(full_key, result)
    yield result


@user_errors
def steer(backend: Backend, prompt: str, max_new_tokens, temperature, top_p, seed, chat, session: Session, *eps: float):
    """The Steer view: the sliders' ε values (in slot order) → streamed steered and unsteered outputs."""
    _, library = backend.get(session=session)
    options = generation_options(max_new_tokens, temperature, top_p, seed, chat)
    shown = 0.0
    for steered, base, scores, changes in _stream(backend, prompt, _steer_setting(session, library, eps), options, session):
        if scores is None:
            if not shown:  # the first token at once, and the previous scores go: they belong to the previous text
                shown = time.perf_counter()
                yield steered, base, PENDING, PENDING, token_html(None, pending=True)
            elif time.perf_counter() - shown >= STREAM_EVERY:  # then a few updates a second
                shown = time.perf_counter()
                yield steered, base, gr.skip(), gr.skip(), gr.skip()
        else:
            yield steered, base, format_scores(scores[0]), format_scores(scores[1]), token_html(changes)


@user_errors
def generate_api(backend: Backend, prompt: str, switches: str, max_new_tokens, temperature, top_p, seed, chat, session: Session) -> dict:
    """Scripting endpoint: ``switches`` as ``"sentiment=5, detox=-2"``; returns both outputs and their scores."""
    _, library = backend.get(session=session)
    options = generation_options(max_new_tokens, temperature, top_p, seed, chat)
    setting = checked_setting(session, library, parse_switch_values(switches))
    *_, last = [None, *_stream(backend, prompt, setting, options, session, changes=False)]
    if last is None or last[2] is None:
        raise ValueError("the generation was stopped by a newer request from the same session")
    steered, base, scores, _ = last
    return {"setting": {s.name: e for s, e in setting}, "steered": steered, "unsteered": base,
            "scores": {"steered": scores[0], "unsteered": scores[1]}}


def batch_protocol(settings: int, samples, options: dict) -> Protocol:
    """Sampling settings of one sweep / composition-map call, refusing calls too big for an interactive answer."""
    samples = _number(samples, "samples", int)
    if settings * samples > MAX_ROWS:
        raise ValueError(f"{settings} ε settings × {samples} samples is more than {MAX_ROWS} generations; use fewer")
    if options["chat"]:
        raise ValueError("sweeps and composition maps continue the plain prompt; turn the chat template off")
    return Protocol(samples=samples, max_new_tokens=options["max_new_tokens"], top_p=options["top_p"],
                    temperature=options["temperature"], seed=options["seed"])


@user_errors
@computed
def run_sweep(backend: Backend, name: str, eps_text: str, samples, prompt: str, max_new_tokens, temperature, top_p, seed, chat,
              session: Session):
    """One batched call: the prompt at a row of ε values of one switch, scored; a plotly chart and the texts."""
    lm, library = backend.get(session=session)
    switch = session.get(name, library)
    eps = parse_eps_list(eps_text, switch, 7)
    protocol = batch_protocol(len(eps), samples, generation_options(max_new_tokens, temperature, top_p, seed, chat))
    evals = evaluate_settings(lm, [[(switch, e)] for e in eps], [prompt], protocol)
    fig = figures.sweep_figure(evals, switch.name, metrics=("positive_share", "mean_toxicity"))
    rows = [[e, k, t["text"], t["sentiment"], t["toxicity"]] for e, ev in zip(eps, evals, strict=True) for k, t in enumerate(ev.texts)]
    return fig, rows


@user_errors
@computed
def run_grid(backend: Backend, first: str, second: str, eps_a_text: str, eps_b_text: str, samples, prompt: str, max_new_tokens,
             temperature, top_p, seed, chat, session: Session):
    """Composition map: two switches over a 2-D grid of ε → heatmaps of the scores; hover a cell for a sample text."""
    lm, library = backend.get(session=session)
    a, b = session.get(first, library), session.get(second, library)
    if a.name == b.name:
        raise ValueError("pick two different switches for the composition map")
    eps_a, eps_b = parse_eps_list(eps_a_text, a, 5), parse_eps_list(eps_b_text, b, 5)
    protocol = batch_protocol(len(eps_a) * len(eps_b), samples, generation_options(max_new_tokens, temperature, top_p, seed, chat))
    flat = evaluate_settings(lm, [[(a, ea), (b, eb)] for ea in eps_a for eb in eps_b], [prompt], protocol)
    grid = [flat[i * len(eps_b) : (i + 1) * len(eps_b)] for i in range(len(eps_a))]
    fig = figures.grid_figure(grid, a.name, b.name, metrics=("positive_share", "mean_toxicity"))
    rows = [[ev.setting.get(a.name, 0.0), ev.setting.get(b.name, 0.0), k, t["text"], t["sentiment"], t["toxicity"]]
            for ev in flat for k, t in enumerate(ev.texts)]
    return fig, rows


# --- Train ----------------------------------------------------------------------------------
def read_input(text: str | None, file: str | None, what: str) -> str:
    """Text from an uploaded file (.txt .md .html .pdf .docx) if given, else the pasted text."""
    if file:
        return read_document(file)
    if text is None or not text.strip():
        raise ValueError(f"{what} is empty: paste text or upload a .txt, .md, .html, .pdf or .docx file")
    return text


def training_data(mode: str, text_a, file_a, text_b, file_b) -> tuple[str | list[str], str | list[str] | None]:
    positive, negative = _training_data(mode, text_a, file_a, text_b, file_b)
    size = sum(map(len, [positive] if isinstance(positive, str) else positive))
    size += sum(map(len, [negative] if isinstance(negative, str) else negative or []))
    if size > MAX_TRAIN_CHARS:
        raise ValueError(f"the training text has {size:,} characters; the app trains on at most {MAX_TRAIN_CHARS:,} (about "
                         f"{MAX_TRAIN_CHARS // 4:,} tokens). Trim it, or train on the command line: python -m lmswitch train --help")
    return positive, negative


def _training_data(mode: str, text_a, file_a, text_b, file_b) -> tuple[str | list[str], str | list[str] | None]:
    if mode == MODES[0]:
        return read_input(text_a, file_a, "the document"), None
    if mode == MODES[1]:
        return read_input(text_a, file_a, "document A"), read_input(text_b, file_b, "document B")
    if mode == MODES[2]:
        pos = split_lines(read_input(text_a, file_a, "the positive list"))
        neg = split_lines(read_input(text_b, file_b, "the negative list"))
        if len(pos) < 2 or len(neg) < 2:
            raise ValueError(f"give at least 2 sentences per side, one per line (got {len(pos)} positive, {len(neg)} negative); 20+ each works much better")
        return pos, neg
    raise ValueError(f"unknown training mode {mode!r}; choose one of {', '.join(MODES)}")


@user_errors
def train(backend: Backend, mode: str, name: str, positive_label: str, negative_label: str, text_a, file_a, text_b, file_b,
          steps, lr, eps0, rank, seed, session: Session, sweep_pick=None, grid_a_pick=None, grid_b_pick=None, manage_pick=None,
          inspect_pick=None, highlight_pick=None, transfer_pick=None, progress=gr.Progress()):  # noqa: B008 (Gradio injects it)
    """Train a switch in a worker thread; stream progress and the loss curve; add it to this session at the end."""
    lm, library = backend.get(session=session)
    current = [sweep_pick, grid_a_pick, grid_b_pick, manage_pick, inspect_pick, highlight_pick, transfer_pick]
    name = check_name(name)
    positive, negative = training_data(mode, text_a, file_a, text_b, file_b)
    steps = _number(steps, "steps", int)
    rank = _number(rank, "rank", int)
    options = dict(name=name, positive_label=(positive_label or "positive").strip(), negative_label=(negative_label or "negative").strip(),
                   steps=steps, lr=_number(lr, "learning rate"), eps0=_number(eps0, "ε0"), seed=_number(seed, "seed", int),
                   rank=rank or None)
    if mode == MODES[0]:
        options["description"] = "learned from one document"
    elif mode == MODES[1]:
        options["description"] = "document A (+) vs document B (−)"
    flag = session.start_training()
    events: queue.Queue = queue.Queue()
    result: dict = {}

    def work() -> None:
        try:
            result["switch"] = train_switch(lm, positive, negative, progress=lambda s, t, loss: events.put((s, t, loss)),
                                            cancel=flag, **options)
        except BaseException as err:  # handed to the streaming loop
            result["error"] = err
        finally:
            events.put(None)

    skip = [gr.skip()] * (MAX_SLOTS + len(current) + 1)
    losses: list[float] = []
    worker = threading.Thread(target=work, name="lmswitch-train", daemon=True)
    worker.start()
    try:
        progress(0, desc="encoding the text")
        yield "Encoding the text…", figures.loss_figure([], total_steps=steps), gr.skip(), *skip
        done, last = False, 0.0
        while not done:
            try:
                item = events.get(timeout=0.5)
            except queue.Empty:
                continue
            batch = [item]
            while not events.empty():
                batch.append(events.get())
            for item in batch:
                if item is None:
                    done = True
                else:
                    losses.append(item[2])
            if losses and (done or time.perf_counter() - last > 0.3):
                last = time.perf_counter()
                progress(len(losses) / steps, desc=f"step {len(losses)} of {steps}")
                yield (f"Training… step {len(losses)} of {steps}, loss {losses[-1]:.3f}", figures.loss_figure(losses, total_steps=steps),
                       gr.skip(), *skip)
        worker.join()
    finally:
        flag.set()  # if the page went away mid-run, stop the worker too
        session.end_training(flag)
    if isinstance(result.get("error"), TrainingCancelled):
        yield f"Cancelled after {len(losses)} of {steps} steps; nothing was added.", gr.skip(), gr.skip(), *skip
        return
    if "error" in result:
        raise result["error"]
    switch = result["switch"]
    final = session.add(switch, library, name=name)
    card = switch.card
    gain = card.get("heldout_gain")
    gain_text = "no held-out split" if gain is None else f"held-out gain **{gain:+.3f} nats/token**"
    renamed = f" (renamed from '{name}', which was taken)" if final != name else ""
    report = (f"### ✔ '{final}'{renamed} is ready — its slider is in the Steer tab\n"
              f"{card['tokens_train']} training tokens, {card['tokens_heldout']} held out, {card['steps']} steps in {card['seconds']:.1f} s; "
              f"{gain_text}.\n\n{data_advice(card)}")
    yield ("Done.", figures.loss_figure(card["train_losses"], card["heldout_losses"], total_steps=steps), report,
           *slot_updates(session, library), *dropdown_updates(session, library, [*current[:3], final, *current[4:]]),
           backend.run(export_path, backend, switch))


def cancel_training(session: Session) -> str:
    return "Cancelling…" if session.cancel_training() else "No training is running in this session."


def export_path(backend: Backend, switch: Switch) -> str:
    """Write ``switch`` to a fresh temporary file for the download button."""
    folder = backend.export_dir / uuid.uuid4().hex
    folder.mkdir(parents=True)
    return str(switch.save(folder / f"{switch.name}.safetensors"))


@user_errors
@computed
def export_switch(backend: Backend, name: str | None, session: Session):
    _, library = backend.get(session=session)
    if not name:
        return gr.DownloadButton(value=None)
    return gr.DownloadButton(value=export_path(backend, session.get(name, library)), label=f"Download {name}.safetensors")


@user_errors
@computed
def save_switch(backend: Backend, name: str | None, session: Session) -> str:
    _, library = backend.get(session=session)
    if not name:
        raise ValueError("pick a switch to save")
    path = session.save(name, library)
    return f"Saved '{name}' to `{path}`; it will be in every new session's library."


@user_errors
@computed
def import_switch(backend: Backend, file: str | None, session: Session, *current: str | None):
    """Upload a ``.safetensors`` switch: validated (format, shape, finiteness, model fingerprint) before it is added."""
    lm, library = backend.get(session=session)
    if not file:
        raise ValueError("no file was uploaded")
    path = Path(file)
    if path.suffix != ".safetensors":
        raise ValueError(f"{path.name} is not a .safetensors switch file")
    switch = load_switch(path, lm)
    final = session.add(switch, library)
    return (f"Imported '{final}' ({switch.positive_label} ↔ {switch.negative_label}); its slider is in the Steer tab.",
            *slot_updates(session, library), *dropdown_updates(session, library, current))


# --- Inspect --------------------------------------------------------------------------------
@user_errors
@computed
def inspect_switch(backend: Backend, name: str, dims, words, session: Session):
    """SVD table (both poles, the promoted one marked), spectrum, word map and the promoted/suppressed words."""
    lm, library = backend.get(session=session)
    switch = session.get(name, library)
    dims, words = _number(dims, "directions", int), _number(words, "words", int)
    svd = svd_dimensions(lm, switch, dims=dims, words=words)
    rows = []
    for d in svd["dimensions"]:
        promoted = ", ".join(w["word"] for w in d["promoted"][:TABLE_WORDS])
        suppressed = ", ".join(w["word"] for w in d["suppressed"][:TABLE_WORDS])
        plus, minus = (suppressed, promoted) if d["flipped"] else (promoted, suppressed)
        rows.append([d["index"] + 1, round(d["singular_value"], 3), round(d["share"], 3), ("−u" if d["flipped"] else "+u"),
                     ("" if d["flipped"] else "▲ ") + plus, ("▲ " if d["flipped"] else "") + minus, round(d["agreement"], 2)])
    pw = promoted_words(lm, switch, words=words)
    word_rows = [[i + 1, up["word"], round(up["delta"], 3), down["word"], round(down["delta"], 3)]
                 for i, (up, down) in enumerate(zip(pw["promoted"], pw["suppressed"], strict=False))]
    return (rows, figures.spectrum_figure(svd["singular_values"]), figures.word_map_figure(word_map(lm, switch, words=min(words, 15))),
            word_rows)


# --- Highlight ------------------------------------------------------------------------------
@user_errors
@computed
def run_highlight(backend: Backend, text: str, file: str | None, name: str, eps, max_span, n_spans, session: Session):
    """Most style-indicative span(s) of the text, a per-token heatmap, and the style meter over the session's switches."""
    lm, library = backend.get(session=session)
    text = read_input(text, file, "the text")
    if len(text) > MAX_HIGHLIGHT_CHARS:
        raise ValueError(f"the text has {len(text):,} characters; highlighting takes at most {MAX_HIGHLIGHT_CHARS:,}. "
                         "Paste the part you want to look at, or use python -m lmswitch highlight --file")
    switch = session.get(name, library)
    eps = _number(eps, "ε")
    result = highlight(lm, switch, text, eps=eps, max_span=_number(max_span, "max span", int), n_spans=_number(n_spans, "spans", int))
    switches = [session.get(n, library) for n in session.available(library)][:MAX_METER_SWITCHES]
    meter = measure(lm, switches, text)
    lines = [f"- **{r['name']}**: best ε {r['best_eps_alone']:+.1f} → *{r['label'] or 'neither'}* "
             f"(evidence {r['evidence_nats']:.1f} nats{'; weak' if r['evidence_nats'] < 1 else ''})" for r in meter["switches"]]
    spans = "; ".join(f"“{s['text']}” ({s['score']:+.2f})" for s in result["spans"]) or "none"
    summary = f"**Spans toward {result['label']}:** {spans}\n\n**Style meter** ({meter['scored_tokens']} tokens):\n" + "\n".join(lines)
    return result["highlighted"], word_heatmap(result["heatmap"]), figures.meter_figure(meter), summary


def word_heatmap(heatmap: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Join sub-word pieces into words for display; a word shows its strongest piece's score."""
    words: list[list] = []
    for piece, score in heatmap:
        glued = words and piece[:1].isalnum() and words[-1][0][-1:].isalnum()
        if glued:
            words[-1][0] += piece
            words[-1][1] = max(words[-1][1], score, key=abs)
        else:
            words.append([piece, score])
    return [(w, v) for w, v in words]


# --- layout -----------------------------------------------------------------------------------
def highlight_examples() -> list[list]:
    items = json.loads((examples_dir() / "highlight.json").read_text())
    return [[x["text"], x["switch"], x["eps"], x["max_span"], x["n_spans"]] for x in items]


def build_app(backend: Backend) -> gr.Blocks:
    bind = functools.partial
    shipped = sorted(p.stem for p in backend.folder.glob("*.safetensors")) if backend.folder and backend.folder.is_dir() else []
    with gr.Blocks(title="lmswitch", analytics_enabled=False) as demo:
        session = gr.State(Session())  # deep-copied into a fresh Session per visitor
        gr.Markdown("# lmswitch <small>steer a language model with LM-Switch</small>", elem_id="title")
        status = gr.Markdown(f"⏳ Loading the model **{backend.model_name}** and the switches… the controls appear as soon as it has loaded.",
                             elem_id="status")
        with gr.Tabs():
            with gr.Tab("Steer", id="steer"):
                with gr.Row():
                    with gr.Column(scale=2, min_width=320):
                        model_pick = gr.Dropdown(backend.choices(), value=backend.model_name, label="model", elem_id="model",
                                                 info="bundled models load (and convert, the first time) when picked")
                        prompt = gr.Textbox(label="prompt", value="My weekend was", lines=3, elem_id="prompt")
                        # hidden until the page loads; each visitor's ranges are set then (API clients may use any |ε| ≤ 1000)
                        sliders = [gr.Slider(-MAX_ABS_EPS, MAX_ABS_EPS, value=0, step=0.5, label=f"switch {i + 1}", visible=False,
                                             elem_id=f"eps-{i}") for i in range(MAX_SLOTS)]
                        with gr.Accordion("generation settings", open=False):
                            max_new = gr.Slider(1, 200, value=40, step=1, label="max new tokens")
                            temperature = gr.Slider(0, 2, value=1.0, step=0.05, label="temperature", info="0 = greedy")
                            top_p = gr.Slider(0.05, 1.0, value=0.9, step=0.05, label="top-p")
                            seed = gr.Number(value=0, precision=0, minimum=0, label="seed")
                            chat = gr.Checkbox(value=False, label="chat template")
                        go = gr.Button("Generate", variant="primary", elem_id="generate")
                    with gr.Column(scale=3):
                        with gr.Row(equal_height=True):
                            with gr.Column():
                                steered = gr.Textbox(label="steered", lines=7, interactive=False, elem_id="steered")
                                steered_scores = gr.Markdown(elem_id="steered-scores")
                            with gr.Column():
                                base = gr.Textbox(label="unsteered (every ε = 0, same seed)", lines=7, interactive=False, elem_id="unsteered")
                                base_scores = gr.Markdown(elem_id="unsteered-scores")
                        tokens = gr.HTML(token_html(None), elem_id="tokens")
                with gr.Accordion("ε sweep: one switch, a row of ε values, one batched call", open=False):
                    with gr.Row():
                        sweep_switch = gr.Dropdown(label="switch", choices=shipped, value="", allow_custom_value=True)
                        sweep_eps = gr.Textbox("", label="ε values", placeholder="empty: 7 values over the switch's range, or e.g. -10, -5, 0, 5, 10")
                        sweep_samples = gr.Slider(1, 8, value=3, step=1, label="samples per ε")
                    sweep_go = gr.Button("Run sweep")
                    sweep_plot = gr.Plot(label="scores vs ε")
                    sweep_table = gr.Dataframe(headers=["ε", "sample", "text", "sentiment", "toxicity"], wrap=True, interactive=False)
                with gr.Accordion("composition map: two switches on a 2-D grid of ε", open=False):
                    with gr.Row():
                        grid_a = gr.Dropdown(label="switch (rows)", choices=shipped, value="", allow_custom_value=True)
                        grid_b = gr.Dropdown(label="switch (columns)", choices=shipped, value="", allow_custom_value=True)
                        grid_samples = gr.Slider(1, 4, value=2, step=1, label="samples per cell")
                    with gr.Row():
                        grid_eps_a = gr.Textbox("", label="ε values (rows)", placeholder="empty: 5 values over the range")
                        grid_eps_b = gr.Textbox("", label="ε values (columns)", placeholder="empty: 5 values over the range")
                    grid_go = gr.Button("Run composition map")
                    grid_plot = gr.Plot(label="scores over the grid (hover a cell for a sample)")
                    grid_table = gr.Dataframe(headers=["ε rows", "ε columns", "sample", "text", "sentiment", "toxicity"], wrap=True, interactive=False)

            with gr.Tab("Train", id="train"):
                with gr.Row():
                    mode = gr.Radio(list(MODES), value=MODES[2], label="what to learn from")
                    new_name = gr.Textbox(label="name", value="my-switch", max_lines=1)
                    pos_label = gr.Textbox(label="positive label (+ε)", value="positive", max_lines=1)
                    neg_label = gr.Textbox(label="negative label (−ε)", value="negative", max_lines=1)
                kinds = [".txt", ".md", ".html", ".htm", ".pdf", ".docx"]
                with gr.Row():
                    with gr.Column():
                        text_a = gr.Textbox("", label="positive sentences, one per line (or document / document A)", lines=10, elem_id="text-a")
                        file_a = gr.File(label="…or upload .txt .md .html .pdf .docx (20 MB max)", file_types=kinds, type="filepath")
                    with gr.Column() as side_b:
                        text_b = gr.Textbox("", label="negative sentences, one per line (or document B)", lines=10, elem_id="text-b")
                        file_b = gr.File(label="…or upload .txt .md .html .pdf .docx (20 MB max)", file_types=kinds, type="filepath")
                with gr.Accordion("advanced settings", open=False):
                    with gr.Row():
                        steps = gr.Number(value=200, precision=0, minimum=1, maximum=5000, label="steps")
                        lr = gr.Number(value=1e-2, minimum=1e-5, maximum=1.0, label="learning rate")
                        eps0 = gr.Number(value=1e-3, minimum=1e-6, maximum=1.0, label="ε0 (ε unit)")
                        rank = gr.Number(value=0, precision=0, minimum=0, label="rank (0 = full)")
                        train_seed = gr.Number(value=0, precision=0, minimum=0, label="seed")
                with gr.Row():
                    train_go = gr.Button("Train", variant="primary", elem_id="train")
                    cancel = gr.Button("Cancel", variant="stop")
                train_status = gr.Markdown(elem_id="train-status")
                loss_plot = gr.Plot(label="training loss")
                train_report = gr.Markdown(elem_id="train-report")
                with gr.Accordion("your switches: save to the library, download, import", open=True):
                    with gr.Row():
                        manage = gr.Dropdown(label="switch", choices=shipped, value="", allow_custom_value=True)
                        save = gr.Button("Save to library")
                        download = gr.DownloadButton("Download .safetensors", value=None)
                        upload = gr.UploadButton("Import .safetensors", file_types=[".safetensors"], type="filepath")
                    manage_status = gr.Markdown()

            with gr.Tab("Inspect", id="inspect"):
                with gr.Row():
                    inspect_name = gr.Dropdown(label="switch", choices=shipped, value="", allow_custom_value=True)
                    dims = gr.Slider(1, 20, value=8, step=1, label="directions")
                    words = gr.Slider(5, 30, value=10, step=1, label="words per pole")
                    inspect_go = gr.Button("Inspect", variant="primary")
                svd_table = gr.Dataframe(headers=["dir", "σ", "share", "↑ at +ε", "+u pole", "−u pole", "agree"],
                                         wrap=True, interactive=False, label="word dimensions (▲ = pushed up at +ε)")
                with gr.Row():
                    spectrum = gr.Plot(label="singular values")
                    scatter = gr.Plot(label="words on the top two directions")
                word_table = gr.Dataframe(headers=["#", "most promoted at +ε", "Δ logit", "most suppressed", "Δ logit"], interactive=False)

            with gr.Tab("Transfer", id="transfer"):
                gr.Markdown("Map a switch to another model: a linear map between the two models' output embeddings, fitted on "
                            "the words both vocabularies share (`lmswitch.core.transfer`, paper §5.3). The transferred switch then "
                            "steers the target model in the Steer tab, at its recommended ε.")
                with gr.Row():
                    tr_switch = gr.Dropdown(label="switch (of the current model)", choices=shipped, value="", allow_custom_value=True)
                    others = [m for m in backend.choices() if m != backend.model_name]
                    tr_target = gr.Dropdown(backend.choices(), value=others[0] if others else backend.model_name, label="target model")
                    tr_go = gr.Button("Transfer", variant="primary", elem_id="transfer")
                tr_report = gr.Markdown(elem_id="transfer-report")

            with gr.Tab("Highlight", id="highlight"):
                with gr.Row():
                    with gr.Column(scale=3):
                        hl_text = gr.Textbox("", label="text", lines=6, elem_id="hl-text")
                        hl_file = gr.File(label="…or upload a document", file_types=kinds, type="filepath")
                    with gr.Column(scale=2):
                        hl_switch = gr.Dropdown(label="switch", choices=shipped, value="", allow_custom_value=True)
                        hl_eps = gr.Slider(-30, 30, value=-4, step=0.5, label="ε (negative: find the switch's negative side)")
                        hl_span = gr.Slider(1, 20, value=5, step=1, label="max span (tokens)")
                        hl_n = gr.Slider(1, 5, value=1, step=1, label="number of spans")
                        hl_go = gr.Button("Highlight", variant="primary", elem_id="highlight")
                gr.Examples(highlight_examples(), inputs=[hl_text, hl_switch, hl_eps, hl_span, hl_n], label="examples (toxic comments, mixed reviews)")
                hl_spans = gr.HighlightedText(label="most style-indicative span(s)", elem_id="hl-spans", show_legend=True)
                hl_heat = gr.HighlightedText(label="per-token contribution (red: toward the chosen side)", elem_id="hl-heatmap")
                with gr.Row():
                    meter_plot = gr.Plot(label="style meter: log-likelihood vs ε")
                    hl_summary = gr.Markdown()

        # hidden inputs/outputs of the scripting endpoint
        api_switches = gr.Textbox("", label="switches", visible=False)
        api_result = gr.JSON(label="result", visible=False)
        api_go = gr.Button(visible=False)

        def app_status() -> dict:
            """Whether the model is loaded, and the switches in the library folder."""
            return backend.status()

        gr.api(app_status, api_name="status", queue=False)

        pickers = [sweep_switch, grid_a, grid_b, manage, inspect_name, hl_switch, tr_switch]
        gen_settings = [max_new, temperature, top_p, seed, chat]
        stream_out = [steered, base, steered_scores, base_scores, tokens]
        live = dict(concurrency_id="generate", concurrency_limit=4, trigger_mode="multiple", show_progress="hidden")

        steer_inputs = [prompt, *gen_settings, session, *sliders]
        loaded = demo.load(bind(on_load, backend), [session, *pickers], [status, *sliders, *pickers], api_visibility="private",
                           concurrency_limit=None)
        loaded.then(bind(steer, backend), steer_inputs, stream_out, api_visibility="private", **live)  # a first generation to look at
        go.click(bind(steer, backend), steer_inputs, stream_out, api_name="steer", **live)
        prompt.input(bind(steer, backend), steer_inputs, stream_out, api_visibility="private", **live)
        for slider in sliders:
            slider.release(bind(steer, backend), steer_inputs, stream_out, api_visibility="private", **live)
        model_pick.input(bind(select_model, backend), [model_pick, session, *pickers], [status, *sliders, *pickers], api_name="select_model",
                         show_progress_on=[status]).then(bind(steer, backend), steer_inputs, stream_out, api_visibility="private", **live)
        tr_go.click(bind(run_transfer, backend), [tr_switch, tr_target, session, *pickers], [tr_report, model_pick, status, *sliders, *pickers],
                    api_name="transfer", show_progress_on=[tr_report]).then(bind(steer, backend), steer_inputs, stream_out,
                                                                             api_visibility="private", **live)
        api_go.click(bind(generate_api, backend), [prompt, api_switches, *gen_settings, session], api_result, api_name="generate",
                     concurrency_id="generate", concurrency_limit=4)
        sweep_go.click(bind(run_sweep, backend), [sweep_switch, sweep_eps, sweep_samples, prompt, *gen_settings, session],
                       [sweep_plot, sweep_table], api_name="sweep", concurrency_id="generate", concurrency_limit=4)
        grid_go.click(bind(run_grid, backend), [grid_a, grid_b, grid_eps_a, grid_eps_b, grid_samples, prompt, *gen_settings, session],
                      [grid_plot, grid_table], api_name="compose", concurrency_id="generate", concurrency_limit=4)

        mode.change(lambda m: gr.Column(visible=m != MODES[0]), mode, side_b, api_visibility="private", queue=False)
        train_go.click(bind(train, backend), [mode, new_name, pos_label, neg_label, text_a, file_a, text_b, file_b, steps, lr, eps0, rank,
                                              train_seed, session, *pickers],
                       [train_status, loss_plot, train_report, *sliders, *pickers, download], api_name="train",
                       concurrency_id="train", concurrency_limit=2, show_progress_on=[train_status])
        cancel.click(cancel_training, session, train_status, api_name="cancel_training", concurrency_limit=None, queue=False)
        manage.change(bind(export_switch, backend), [manage, session], download, api_visibility="private")
        save.click(bind(save_switch, backend), [manage, session], manage_status, api_name="save_switch")
        upload.upload(bind(import_switch, backend), [upload, session, *pickers], [manage_status, *sliders, *pickers], api_name="import_switch")

        inspect_go.click(bind(inspect_switch, backend), [inspect_name, dims, words, session], [svd_table, spectrum, scatter, word_table],
                         api_name="inspect")
        hl_go.click(bind(run_highlight, backend), [hl_text, hl_file, hl_switch, hl_eps, hl_span, hl_n, session],
                    [hl_spans, hl_heat, meter_plot, hl_summary], api_name="highlight")
    return demo


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(description="lmswitch web app (Gradio)")
    p.add_argument("--host", default=env("LMSWITCH_HOST", "127.0.0.1"), help="interface to listen on (env LMSWITCH_HOST; default 127.0.0.1)")
    p.add_argument("--port", type=int, default=int(env("LMSWITCH_PORT", "7860")), help="port (env LMSWITCH_PORT; default 7860)")
    p.add_argument("--model", default=env("LMSWITCH_MODEL", DEFAULT_MODEL), help="model alias, folder, .gguf or cached hub id (env LMSWITCH_MODEL)")
    p.add_argument("--switches", default=env("LMSWITCH_SWITCHES", str(DEFAULT_SWITCHES)),
                   help="switch library folder: loaded at start, 'Save to library' writes here (env LMSWITCH_SWITCHES)")
    p.add_argument("--share", action="store_true", help="create a public Gradio share link (off by default)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.switches and not Path(args.switches).is_dir():
        raise SystemExit(f"switch folder {args.switches} does not exist; create it or pass --switches DIR")
    backend = Backend(args.model, args.switches).start()
    demo = build_app(backend)
    demo.queue(default_concurrency_limit=2)
    print(f"lmswitch: loading {args.model} in the background; open http://{args.host}:{args.port}", flush=True)
    demo.launch(server_name=args.host, server_port=args.port, share=args.share, show_error=True, ssr_mode=False,
                css_paths=[ASSETS / "app.css"], footer_links=["api"],
                max_file_size="256mb")  # documents are refused above 20 MB with a clear message; switches of big models are larger


if __name__ == "__main__":
    main()
