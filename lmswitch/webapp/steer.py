"""Steer tab: the model picker, live ε sliders (steered vs unsteered), the scripting endpoint, ε sweep and composition map."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Sequence

import gradio as gr

from lmswitch.core.models import LanguageModel
from lmswitch.core.options import MIN_ANCHORS as MIN_ANCHORS  # (a module attribute the app's tests can lower)
from lmswitch.core.options import SAMPLING
from lmswitch.core.steering import Setting, beyond_fluent_field
from lmswitch.core.switch import Switch
from lmswitch.core.transfer import fit_text, strength_advice, transfer
from lmswitch.harness import figures
from lmswitch.harness.evaluate import Protocol, evaluate_settings
from lmswitch.io.parse import eps_grid, parse_eps_list, parse_number, parse_setting
from lmswitch.serve.compare import Comparison, compare
from lmswitch.serve.limits import MAX_ROWS, check_request
from lmswitch.serve.session import Session
from lmswitch.webapp.backend import Backend, computed, user_errors
from lmswitch.webapp.widgets import (
    GUARD_ON,
    MAX_SLOTS,
    PENDING,
    checked_setting,
    dropdown_updates,
    format_scores,
    library_view,
    sampling,
    slider_range,
    slot_names,
    slot_setting,
    slot_updates,
    steered_but_gone,
    token_html,
)

STREAM_EVERY = 0.1  # seconds between streamed text updates (each costs the server and the browser a render)
TRANSFERRING = ("⏳ Mapping '{name}' onto {target} (loaded the first time), then probing its fluent ε range on a few of "
                "{target}'s dev prompts, which its slider will span: about half a minute on a CPU…")
SWEEP_POINTS, GRID_POINTS = 7, 5  # ε values when the box is left empty: spread over the switch's range


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


def refresh_sliders(backend: Backend, session: Session, *values: float) -> list:
    """The slider slots again, as they are now (after a save: no longer marked unsaved; after a new switch's fluent range
    was measured: spanning it), their values kept, each moved into its slider's range."""
    _, library = backend.get(session=session)
    kept = dict(zip(slot_names(session, library), (float(v or 0.0) for v in values), strict=False))
    return slot_updates(session, library, values=kept)


def library_watch(backend: Backend, session: Session, *values: float | str | None) -> list:
    """The page's timer (every :data:`~lmswitch.webapp.widgets.LIBRARY_WATCH_S`): when another page saved or deleted a
    switch since this page last drew its switches, the header, the sliders (each keeping its value) and the pickers (one
    whose switch went is left empty) are drawn again; else nothing is sent. ``values``: the sliders', then the pickers'.
    The last output asks for the texts again (a new value of the page's ``rewrite`` state) when a deleted switch was
    steering them: they were written with it, and stayed on screen after its slider went."""
    outputs = 2 + len(values)
    if session.shown is None or not backend.ready.is_set() or backend.error:  # the page has not loaded yet
        return [gr.skip()] * outputs
    _, library = backend.get(session=session)
    if library_view(session, library) == session.shown:
        return [gr.skip()] * outputs
    sliders, pickers = values[:MAX_SLOTS], values[MAX_SLOTS:]
    rewrite = time.monotonic() if steered_but_gone(session, library, sliders) else gr.skip()  # (before the slots are redrawn)
    return [model_status(backend, session), *refresh_sliders(backend, session, *sliders),
            *dropdown_updates(session, library, pickers, emptied=True), rewrite]


WIDE_WARNING = ("⚠ **Sliders beyond the fluent range.** Past a switch's calibrated fluent ε, steered text reads less well: it "
                "drifts from one style word to the next, strings one word or mark through a sentence (\"a mission's expedition's hours's\", \"so; but; would they;\") "
                "and, with the *repeat guard* off, repeats words (\"great great great\"); "
                "tick *adaptive strength* to stop the steering once it has changed a text enough (fluent, at the cost of a weaker "
                "effect for styles that need a push on every word, such as casual).")


def widen_sliders(backend: Backend, wide: bool, session: Session, *values: float):
    """The "beyond the fluent range" toggle: this session's sliders reach twice as far each way (with a warning) or
    span each switch's calibrated fluent range again, a value outside it moved to the nearest end."""
    session.wide_sliders = bool(wide)
    return [gr.Markdown(WIDE_WARNING if wide else "", visible=bool(wide)), *refresh_sliders(backend, session, *values)]


@user_errors
def select_model(backend: Backend, name: str, session: Session, *current: str | None):
    """The model picker: steer another model (loaded the first time, converted and cached like the default one; not
    on the compute thread, so other users' generations go on meanwhile)."""
    _, library = backend.model(name)
    session.model = name
    return [model_status(backend, session), *slot_updates(session, library, reset=True), *dropdown_updates(session, library, current),
            target_picker(backend, name)]


def target_picker(backend: Backend, model: str, **kwargs) -> gr.Dropdown:
    """The Transfer tab's target model picker: the models other than ``model``, the one the page steers, the first picked."""
    others = [m for m in backend.choices() if m != model]
    return gr.Dropdown(choices=others, value=others[0] if others else None, **kwargs)


def _transfer_report(final: str, target: str, moved: Switch, at: float) -> str:
    return (f"### ✔ '{final}' steers {target}: the Steer tab now uses {target}, its slider at ε {at:+g}\n"
            f"{strength_advice(moved, target)}\n\nThe map between the vocabularies was {fit_text(moved.card.transfer, 6)} "
            "(how often a mapped word's nearest source word is itself).")


@user_errors
def run_transfer(backend: Backend, name: str, target: str, session: Session, *current: str | None):
    """Map a switch to another model (``Hᵀ W H``), probe its fluent ε range there, keep it in this session, and steer the
    target model with it: first a line saying what the wait is for, then the report. The target model is loaded (the
    first time) before the mapping goes to the compute thread, not on it."""
    source_lm, source_library = backend.get(session=session)
    switch = session.get(name, source_library)
    source = session.model or backend.model_name
    if not target:
        raise ValueError("pick a target model")
    if target == source:
        raise ValueError(f"'{name}' already steers {target}, the model this page steers: pick another target model")
    yield [TRANSFERRING.format(name=name, target=target), *[gr.skip()] * (3 + MAX_SLOTS + len(current))]
    target_lm, target_library = backend.model(target)
    moved = backend.run(transfer, switch, source_lm, target_lm, min_anchors=MIN_ANCHORS, background=True)
    moved.card = backend.calibrated(target_lm, moved)  # the scaled ε alone can read as word salad on the target
    final = session.add(moved, target_library)
    session.model = target
    at = moved.on_slider(moved.card.recommended_eps or 0.0, session.wide_sliders)  # none when no +ε read fluently: 0
    yield [_transfer_report(final, target_lm.name, moved, at), gr.Dropdown(choices=backend.choices(), value=target),
            model_status(backend, session), *slot_updates(session, target_library, reset=True, values={final: at}),
            *dropdown_updates(session, target_library, current), target_picker(backend, target)]


def _comparisons(backend: Backend, session: Session, prompt: str, setting: Setting, widgets: Sequence, stop: threading.Event,
                 changes: bool = True):
    """The library's streamed comparison for this session (``setting`` from :func:`checked_setting`), stopped once
    ``stop`` is set (:meth:`Session.new_generation`: by a newer request of the page, or its closing)."""
    lm = backend.get(session=session)[0]
    options, seed = sampling(*widgets)
    return compare(lm, prompt, setting, seed=seed, options=options, cache=backend.comparisons, compute=backend.compute,
                   stop=stop, changes=changes, batcher=backend.batcher(lm))


@user_errors
def steer(backend: Backend, prompt: str, max_new_tokens, temperature, top_p, seed, chat, session: Session, *values):
    """The Steer view: the sliders' ε values (in slot order), then optionally the adaptive-strength checkbox, the
    best-of count, the guided count and the repeat-guard checkbox → streamed steered and unsteered outputs (with best of
    n or guided, both at the end). (These come last so that scripts calling ``/steer`` with the slider values alone keep
    working.)"""
    _, library = backend.get(session=session)
    eps, extra = values[:MAX_SLOTS], values[MAX_SLOTS:]
    widgets = (max_new_tokens, temperature, top_p, seed, chat, bool(extra[0]) if extra else False,
               extra[1] if len(extra) > 1 else SAMPLING.best_of, extra[2] if len(extra) > 2 else SAMPLING.guide,
               extra[3] if len(extra) > 3 else GUARD_ON)
    setting = slot_setting(session, library, eps)
    stop = session.new_generation()
    try:
        yield from _streamed(_comparisons(backend, session, prompt, setting, widgets, stop), session, stop)
    finally:
        session.end_generation(stop)


def _streamed(items, session: Session, stop: threading.Event):
    """:func:`steer`'s outputs from the library's streamed comparison, until ``stop`` is set."""
    shown = 0.0
    for item in items:
        if stop.is_set():  # a newer request of the page came meanwhile: its texts are on screen, not this one's
            break
        if isinstance(item, Comparison):
            session.after_older_generations(stop)  # their events' last outputs reach the page first, not over these
            if stop.is_set():
                break
            yield (item.steered, item.unsteered, format_scores(item.steered_scores), format_scores(item.unsteered_scores),
                   token_html(item.changes))
            if not stop.is_set():  # else Gradio would send it again as the event ends, over the newer request's (below)
                return
        elif not shown:  # the first token at once, and the previous scores go: they belong to the previous text
            shown = time.perf_counter()
            yield item.steered, item.unsteered, PENDING, PENDING, token_html(None, pending=True)
        elif time.perf_counter() - shown >= STREAM_EVERY:  # then a few updates a second
            shown = time.perf_counter()
            yield item.steered, item.unsteered, gr.skip(), gr.skip(), gr.skip()
    # stopped by a newer request of the page. Gradio ends an event with its last outputs again (none: empty boxes), which
    # put this text, partial or not, or nothing, over the newer request's (a retyped prompt's, answered at once from the
    # cache; on a slow machine an older keystroke's partial text came after it)
    yield (gr.skip(),) * 5


@user_errors
def generate_api(backend: Backend, prompt: str, switches: str, max_new_tokens, temperature, top_p, seed, chat, session: Session,
                 adaptive: bool = False, best_of=SAMPLING.best_of, guide=SAMPLING.guide, repeat_guard: bool = GUARD_ON) -> dict:
    """Scripting endpoint: ``switches`` as ``"sentiment=5, detox=-2"``; returns both outputs and their scores.
    ``adaptive`` steers each generation until its steering budget is spent, so strong settings stay fluent;
    ``best_of`` keeps the likeliest of that many candidates of each output; ``guide`` decodes guided by the switches'
    judges with that many candidates per piece; ``repeat_guard`` False is the paper's plain steering (no guard against
    a switch pushing a word it has just written)."""
    widgets = (max_new_tokens, temperature, top_p, seed, chat, adaptive, best_of, guide, repeat_guard)
    # a script may send several at once (gradio_client's submit): none stops another, unlike a dragged slider's
    setting = checked_setting(session, backend.get(session=session)[1], parse_setting(switches))
    items = _comparisons(backend, session, prompt, setting, widgets, session.new_generation(False), changes=False)
    last = collections.deque(items, maxlen=1)
    if not last or not isinstance(last[0], Comparison):
        raise ValueError("the generation was stopped: its client closed")
    return {**last[0].to_dict(), **beyond_fluent_field(setting)}  # as the OpenAI API notes them


def batch_protocol(lm: LanguageModel, prompt: str, settings: int, samples, widgets: Sequence) -> Protocol:
    """Sampling settings of one sweep / composition-map call, refusing calls too big for an interactive answer."""
    samples = parse_number(samples, "samples", int)
    options, seed = sampling(*widgets)
    check_request(lm, prompt, options)
    if settings * samples * options.candidates > MAX_ROWS:
        raise ValueError(f"{settings} ε settings × {samples} samples" + (f" × {options.candidates} candidates" if options.candidates > 1 else "")
                         + f" is more than {MAX_ROWS} generations; use fewer")
    if options.chat:
        raise ValueError("sweeps and composition maps continue the plain prompt; turn the chat template off")
    return Protocol.from_sampling(options, samples=samples, seed=seed)


def _eps_values(text: str | None, session: Session, switch: Switch, count: int) -> list[float]:
    """The ε typed, else ``count`` across the switch's slider range (not widened; provisional while it is measured)."""
    return parse_eps_list(text, default=eps_grid(*slider_range(session, switch.name, switch, wide=False), count))


@user_errors
@computed
def run_sweep(backend: Backend, name: str, eps_text: str, samples, prompt: str, max_new_tokens, temperature, top_p, seed, chat,
              session: Session, adaptive: bool = False, best_of=SAMPLING.best_of, guide=SAMPLING.guide, repeat_guard: bool = GUARD_ON):
    """One batched call: the prompt at a row of ε values of one switch, scored; a plotly chart and the texts."""
    lm, library = backend.get(session=session)
    switch = session.get(name, library)
    eps = _eps_values(eps_text, session, switch, SWEEP_POINTS)
    protocol = batch_protocol(lm, prompt, len(eps), samples, (max_new_tokens, temperature, top_p, seed, chat, adaptive, best_of, guide, repeat_guard))
    evals = evaluate_settings(lm, [[(switch, e)] for e in eps], [prompt], protocol)
    fig = figures.sweep_figure(evals, switch.name, metrics=("positive_share", "mean_toxicity"), fluent=switch.card.fluent_eps)
    rows = [[e, k, t.text, t.sentiment, t.toxicity] for e, ev in zip(eps, evals, strict=True) for k, t in enumerate(ev.texts)]
    return fig, rows


@user_errors
@computed
def run_grid(backend: Backend, first: str, second: str, eps_a_text: str, eps_b_text: str, samples, prompt: str, max_new_tokens,
             temperature, top_p, seed, chat, session: Session, adaptive: bool = False, best_of=SAMPLING.best_of, guide=SAMPLING.guide,
             repeat_guard: bool = GUARD_ON):
    """Composition map: two switches over a 2-D grid of ε → heatmaps of the scores; hover a cell for a sample text."""
    lm, library = backend.get(session=session)
    a, b = session.get(first, library), session.get(second, library)
    if a.name == b.name:
        raise ValueError("pick two different switches for the composition map")
    eps_a, eps_b = _eps_values(eps_a_text, session, a, GRID_POINTS), _eps_values(eps_b_text, session, b, GRID_POINTS)
    protocol = batch_protocol(lm, prompt, len(eps_a) * len(eps_b), samples,
                              (max_new_tokens, temperature, top_p, seed, chat, adaptive, best_of, guide, repeat_guard))
    flat = evaluate_settings(lm, [[(a, ea), (b, eb)] for ea in eps_a for eb in eps_b], [prompt], protocol)
    grid = [flat[i * len(eps_b) : (i + 1) * len(eps_b)] for i in range(len(eps_a))]
    fig = figures.grid_figure(grid, a.name, b.name, metrics=("positive_share", "mean_toxicity"))
    rows = [[ev.setting.get(a.name, 0.0), ev.setting.get(b.name, 0.0), k, t.text, t.sentiment, t.toxicity]
            for ev in flat for k, t in enumerate(ev.texts)]
    return fig, rows
