"""Train tab: learn a switch from pasted or uploaded text with live progress; save, download and import switches."""

from __future__ import annotations

import time
import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from lmswitch.core.models import LanguageModel
from lmswitch.core.options import EXAMPLES, NAMINGS, ONE_DOCUMENT, TWO_DOCUMENTS, TrainConfig
from lmswitch.core.switch import Switch, load_switch, usable_name
from lmswitch.core.train import Done, Encoded, Evaluated, Step, TrainEvent, TrainingCancelled, advise_on_data, train_events
from lmswitch.harness import figures
from lmswitch.io.documents import split_lines
from lmswitch.io.parse import parse_number
from lmswitch.lenses.learned import what_was_learned
from lmswitch.serve.limits import MAX_TRAIN_CHARS, check_train_steps
from lmswitch.serve.session import Session, SwitchLibrary, check_name
from lmswitch.webapp.backend import USER_ERRORS, Backend, computed, user_errors
from lmswitch.webapp.widgets import (
    MANAGE_PICKER,
    MAX_SLOTS,
    ON_A_SLIDER,
    PICKER_DEFAULTS,
    dropdown_updates,
    measuring_note,
    optional_text,
    read_input,
    slot_updates,
    uploaded,
    where_to_steer,
)

MODES = ("one document", "two documents (A vs B)", "labelled sentences")
KINDS = dict(zip(MODES, (ONE_DOCUMENT, TWO_DOCUMENTS, EXAMPLES), strict=True))  # each mode's data shape (train.data_kind)
# the two text boxes' labels by the mode's data shape (one document has no second box)
TEXT_LABELS = {ONE_DOCUMENT: ("the document", "(not used for one document)"), TWO_DOCUMENTS: ("document A", "document B"),
               EXAMPLES: ("positive sentences, one per line", "negative sentences, one per line")}
TRAIN_ADVICE = (f"the app trains on at most {MAX_TRAIN_CHARS:,} (about {MAX_TRAIN_CHARS // 4:,} tokens) in all. Trim it, or "
                "train on the command line: python -m lmswitch train --help")
MAX_LABEL_CHARS = 80  # a side's label (shown on the slider, stored in the card)
UPDATE_EVERY = 0.3  # seconds between progress updates of the loss curve
READING = "⏳ Trained. Reading what the switch learned…"
CANCELLED_READING = "*Cancelled after training: what the switch learned was not read. The switch is kept.*"
CANCELLED_PROBE = "cancelled after training; the switch is kept"
PROBING = "⏳ Ready to steer. Measuring its fluent ε range on a few dev prompts (its slider will span it)…"


def _file_labels(file_a: str | None, file_b: str | None) -> tuple[str | None, str | None]:
    """Two uploaded documents' names without their suffixes, as the sides' labels ("pro-tax" from pro-tax.pdf); None
    for a side without a file, and for both when the names are one (download.pdf twice)."""
    a, b = ((Path(file).stem.strip()[:MAX_LABEL_CHARS] or None) if file else None for file in (file_a, file_b))
    return (None, None) if a is not None and b is not None and a.casefold() == b.casefold() else (a, b)


def _labels(mode: str, positive_label, negative_label, file_a: str | None, file_b: str | None) -> list[str | None]:
    """The sides' labels as typed; one left blank is the library's for the data (None: the boxes show it as their
    placeholder, mode_changed), or for two uploaded documents their files' names."""
    files = _file_labels(file_a, file_b) if mode == MODES[1] else (None, None)
    return [optional_text(label, f"the {side} label", MAX_LABEL_CHARS).strip() or file
            for label, side, file in ((positive_label, "positive", files[0]), (negative_label, "negative", files[1]))]


def _training_data(mode: str, text_a, file_a, text_b, file_b) -> tuple[str | list[str], str | list[str] | None]:
    if mode == MODES[0]:
        return read_input(text_a, file_a, "the document", MAX_TRAIN_CHARS, TRAIN_ADVICE), None
    if mode == MODES[1]:
        return read_input(text_a, file_a, "document A", MAX_TRAIN_CHARS, TRAIN_ADVICE), read_input(text_b, file_b, "document B", MAX_TRAIN_CHARS, TRAIN_ADVICE)
    if mode == MODES[2]:
        # (one line a side is one text each: the library says how long it must be, as it does for the CLI)
        return (split_lines(read_input(text_a, file_a, "the positive list", MAX_TRAIN_CHARS, TRAIN_ADVICE)),
                split_lines(read_input(text_b, file_b, "the negative list", MAX_TRAIN_CHARS, TRAIN_ADVICE)))
    raise ValueError(f"unknown training mode {mode!r}; choose one of {', '.join(MODES)}")


@dataclass(frozen=True)
class ModeWidgets:
    """What the Train tab's widgets show in a training mode (the layout's first state, and each change of mode)."""

    side_b: bool  # document B's side (or the negative sentences) shown
    positive_placeholder: str  # what a blank label becomes
    negative_placeholder: str
    text_a: str  # the text boxes' labels for the mode's data
    text_b: str


def mode_widgets(mode: str) -> ModeWidgets:
    kind = KINDS.get(mode, EXAMPLES)
    named = NAMINGS[kind]
    or_file = " (or the uploaded file's name)" if mode == MODES[1] else ""  # (train: _file_labels)
    return ModeWidgets(mode != MODES[0], named.positive_label + or_file, named.negative_label + or_file, *TEXT_LABELS[kind])


def mode_changed(mode: str) -> tuple:
    """A new training mode: side B, the labels emptied to show the mode's own as placeholders (labels typed for two
    documents, "pro-subsidy", named the sides of the next mode's switches too), and the text boxes' labels
    (:func:`mode_widgets`)."""
    shown = mode_widgets(mode)
    return (gr.Column(visible=shown.side_b), gr.Textbox(value="", placeholder=shown.positive_placeholder),
            gr.Textbox(value="", placeholder=shown.negative_placeholder), gr.Textbox(label=shown.text_a), gr.Textbox(label=shown.text_b))


def training_data(mode: str, text_a, file_a, text_b, file_b) -> tuple[str | list[str], str | list[str] | None]:
    """The widgets' texts as (positive, negative) training data, refusing more than the app trains on."""
    positive, negative = _training_data(mode, text_a, file_a, text_b, file_b)
    size = sum(map(len, [positive] if isinstance(positive, str) else positive))
    size += sum(map(len, [negative] if isinstance(negative, str) else negative or []))
    if size > MAX_TRAIN_CHARS:
        raise ValueError(f"the training text has {size:,} characters; {TRAIN_ADVICE}")
    return positive, negative


def train_config(steps, lr, eps0, rank, seed) -> TrainConfig:
    """The advanced-settings widgets → a TrainConfig (rank 0 means full rank); the library validates the ranges."""
    rank = parse_number(rank, "rank", int)
    return TrainConfig(steps=check_train_steps(parse_number(steps, "steps", int)), lr=parse_number(lr, "learning rate"), eps0=parse_number(eps0, "ε0"),
                       seed=parse_number(seed, "seed", int), rank=rank or None)


def _report(final: str, name: str, switch: Switch, measuring: str = "", steered: str = ON_A_SLIDER) -> str:
    """The Train tab's report on a new switch; ``measuring``: the note while its fluent range is measured; ``steered``:
    where the page steers it (:func:`~lmswitch.webapp.widgets.where_to_steer`)."""
    card = switch.card
    renamed = f" (renamed from '{name}', which was taken)" if final != name else ""
    recommended = f"; recommended ε {card.recommended_eps:+g}" if card.fluent_text and card.recommended_eps else ""
    fluent_text = f" Fluent ε range (its slider's range): {card.fluent_text}{recommended}." if card.fluent_text else ""
    if card.calibration_error == CANCELLED_PROBE:
        lo, hi = switch.slider_range()
        fluent_text = (f" Its fluent-range probe was cancelled: its slider spans the usual range, {lo:+g} … {hi:+g}, past "
                       "where most trained switches read well (train it again to measure it).")
    elif card.calibration_error:
        fluent_text = f" The fluent-range probe failed ({card.calibration_error}); its slider spans the usual range."
    if measuring:
        fluent_text = f" {measuring}"
    advice = advise_on_data(card)  # a switch that may not generalise was announced "✔ … is ready" above its advice
    mark, caution = (("⚠", ", but it may not generalise (see below)") if advice.weak else
                     ("⚠", ", but held-out text fits it no better than the model alone (see below)") if advice.no_gain else ("✔", ""))
    return (f"### {mark} '{final}'{renamed} is ready{caution} — {steered}.{fluent_text}\n"
            f"{card.training.tokens_train} training tokens, {card.training.tokens_heldout} held out, {card.training.summary(3)}."
            f"\n\n{advice.text}")


def _progress_updates(events: Iterator[TrainEvent], planned: list[int], progress, skip: list, losses: list[float]) -> Iterator:
    """Status text and loss curve while training runs, a few times a second; the last event (Done) is yielded as is."""
    held: list[tuple[int, float]] = []
    last = 0.0
    for event in events:
        if isinstance(event, Done):
            yield event
            return
        if isinstance(event, Encoded):
            progress(0, desc=f"training on {event.tokens_train:,} tokens")
        elif isinstance(event, Evaluated):
            held.append((event.step, event.heldout_loss))
        elif isinstance(event, Step):
            losses.append(event.loss)
            total = planned[0] = event.total  # L-BFGS plans fewer than the step cap (a cancel says that number too)
            if time.perf_counter() - last > UPDATE_EVERY or event.step == total:
                last = time.perf_counter()
                progress(event.step / total, desc=f"step {event.step} (at most {total})")
                yield (f"Training… step {event.step} (at most {total}; it may stop sooner), loss {event.loss:.3f}",
                       figures.loss_figure(losses, held, total_steps=total), gr.skip(), *skip)


@user_errors
def train(backend: Backend, mode: str, name: str, positive_label: str, negative_label: str, text_a, file_a, text_b, file_b,
          steps, lr, eps0, rank, seed, session: Session, sweep_pick=None, grid_a_pick=None, grid_b_pick=None, manage_pick=None,
          inspect_pick=None, highlight_pick=None, transfer_pick=None, progress=gr.Progress()):  # noqa: B008 (Gradio injects it)
    """Train a switch one step at a time on the compute thread; stream progress and the loss curve; add it to this session.
    Input refused before training is said in the status line too: the toast fades, and the line kept the last run's
    words ("Not trained: … identical" under a new upload's "could not be read as a PDF")."""
    current = [sweep_pick, grid_a_pick, grid_b_pick, manage_pick, inspect_pick, highlight_pick, transfer_pick]
    try:
        lm, library = backend.get(session=session)
        name = check_name(name)
        positive, negative = training_data(mode, text_a, file_a, text_b, file_b)
        config = train_config(steps, lr, eps0, rank, seed)
        config.validate(lm.hidden_size)  # (steps 0 was refused by the loss chart: "total_steps must be a positive integer")
        labels = _labels(mode, positive_label, negative_label, file_a, file_b)
    except USER_ERRORS as err:
        yield _not_trained(err, current)
        raise
    job = _Job(lm, library, name, positive, negative, config, labels, current)
    flag = session.start_training()  # (refused while this session trains: the running one's status stays)
    try:  # the run lasts until the card is written: a closed page's session is moved to disk only after that (Session.spill)
        yield from _train_and_add(backend, session, job, flag, progress)
    finally:
        session.end_training(flag)


@dataclass(frozen=True)
class _Job:
    """One Train-tab run's checked inputs (``current``: the switch pickers' choices)."""

    lm: LanguageModel
    library: SwitchLibrary
    name: str
    positive: str | list[str]
    negative: str | list[str] | None
    config: TrainConfig
    labels: list[str | None]  # None: the library's label for the data
    current: list


def _unchanged(pickers: list) -> list:
    """The Train event's outputs after its status, loss curve and report, each left as it is: the sliders, the
    pickers, the download button, what it learned."""
    return [gr.skip()] * (MAX_SLOTS + len(pickers) + 2)


def _not_trained(err: Exception, pickers: list, chart=None) -> tuple:
    """The Train event's outputs for a refused run: the status says why (the toast fades); the last run's report and
    what it learned go, as when a run starts (beside "Not trained" they read as this click's), and the loss chart with
    them unless ``chart`` keeps this run's."""
    return f"Not trained: {err}", chart, "", *_unchanged(pickers)[:-1], ""


def _train_and_add(backend: Backend, session: Session, job: _Job, flag, progress) -> Iterator[tuple]:
    """Train (progress, loss curve), add the switch, show what it learned, probe its fluent range; a cancel after the
    training itself skips the reading, ends the probe at once, and the switch is kept."""
    skip = _unchanged(job.current)
    done = yield from _trained(backend, job, flag, progress, skip)
    if done is None:
        return
    final = session.add(done.switch, job.library, name=job.name)  # kept from here on, even if the page goes away
    session.reported = final
    progress(1.0, desc="reading what it learned")
    yield READING, gr.skip(), gr.skip(), *skip
    learned = CANCELLED_READING if flag.is_set() else _learned(backend, job.lm, done, job.positive, job.negative)
    session.measuring.add(final)
    try:  # steered at once, its slider provisional: a user reads what it learned and tries it while the range is probed
        _, shown = backend.get(session=session)  # the model the page steers now (the picker may have changed it)
        picked = [*job.current[:3], final, *job.current[4:]]  # the manage picker on the new switch
        yield (PROBING, gr.skip(), _report(final, job.name, done.switch, measuring_note(session.wide_sliders),
                                           where_to_steer(session, shown, final)),
               *slot_updates(session, shown), *dropdown_updates(session, shown, picked), gr.skip(), learned)
        # a cancel before or during the probe ends it (the session holds this very switch: its card is updated)
        done.switch.card = backend.calibrated(job.lm, done.switch, cancel=flag, cancelled=CANCELLED_PROBE)
    finally:
        session.measuring.discard(final)
    yield *_finished(backend, session, job.name, final, done.switch), learned  # the last message


def _trained(backend: Backend, job: _Job, flag, progress, skip: list) -> Generator[tuple, None, Done | None]:
    """The training run's progress messages; returns its ``Done`` (None when cancelled, after saying so)."""
    losses: list[float] = []
    planned = [job.config.steps]  # the steps the run plans at most: the step cap, or fewer once the trainer says so
    events = backend.compute.stepped(train_events(
        job.lm, job.positive, job.negative, name=job.name, config=job.config, cancel=flag,
        positive_label=job.labels[0], negative_label=job.labels[1]))
    try:
        progress(0, desc="encoding the text")
        # the last run's report and what it learned go: they would read as this run's until it replaces them
        yield "Encoding the text…", figures.loss_figure([], total_steps=job.config.steps), "", *skip[:-1], ""
        for update in _progress_updates(events, planned, progress, skip, losses):
            if isinstance(update, Done):
                return update
            yield update
    except TrainingCancelled:
        yield f"Cancelled after {len(losses)} of at most {planned[0]} steps; nothing was added.", gr.skip(), gr.skip(), *skip
        return None
    except USER_ERRORS as err:  # refused once reading began (e.g. no tokens left to train on): the status says so too
        yield _not_trained(err, job.current, chart=gr.skip() if losses else None)
        raise
    finally:
        events.close()  # if the page went away mid-run, stop training too
    raise RuntimeError("the training run ended without a result")


def _finished(backend: Backend, session: Session, name: str, final: str, switch: Switch) -> tuple:
    """The panel once the range is measured. The sliders get their new ranges from the event after this one
    (``steer.refresh_sliders``): it reads the page's values, which Gradio checks against the ranges the page has, and
    moves them inside the new ones. The other views' pickers stay as the user left them while the range was measured;
    the Train tab's own (manage) picker and download offer the new switch, now with its range, while the page steers
    its model."""
    card = switch.card
    _, shown = backend.get(session=session)
    names = session.available(shown)
    ours = final in names
    manage = [gr.Dropdown(choices=names, value=final)] if ours else [gr.skip()]
    download = gr.DownloadButton(value=backend.run(export_path, backend, switch), label=f"Download {final}.safetensors") if ours else gr.skip()
    return ("Done.", figures.loss_figure(card["train_losses"], card["heldout_losses"], total_steps=card["steps"]),
            _report(final, name, switch, steered=where_to_steer(session, shown, final)), *[gr.skip()] * (MAX_SLOTS + MANAGE_PICKER), *manage,
            *[gr.skip()] * (len(PICKER_DEFAULTS) - MANAGE_PICKER - 1), download)


def _learned(backend: Backend, lm: LanguageModel, done: Done, positive: str | list[str], negative: str | list[str] | None) -> str:
    """What the new switch learned, as Markdown: its words, and for documents their spans and the meter's verdict.

    The switch is already in the session (its slider comes after the probe); a failure here shows a short note instead
    of an error.
    """
    document = positive if isinstance(positive, str) else None  # labelled sentences: the words only
    other = negative if isinstance(negative, str) else None
    try:
        return backend.run(what_was_learned, lm, done.switch, document, other, read=done.documents, background=True).to_markdown()
    except Exception as err:  # any failure: the trained switch must not be lost over its summary
        return f"*Could not read what it learned ({type(err).__name__}: {err}); the switch is kept all the same.*"


def cancel_training(session: Session) -> str:
    return "Cancelling…" if session.cancel_training() else "No training is running in this session."


DOWNLOAD = "Download .safetensors"  # the Train tab's download button while no switch is picked


def export_path(backend: Backend, switch: Switch) -> str:
    """Write ``switch`` to a fresh temporary file for the download button."""
    folder = backend.export_dir / uuid.uuid4().hex
    folder.mkdir(parents=True)
    return str(switch.save(folder / f"{switch.name}.safetensors"))


@user_errors
@computed(background=False)
def export_switch(backend: Backend, name: str | None, session: Session):
    _, library = backend.get(session=session)
    if not name:  # (its label named the switch picked before)
        return gr.DownloadButton(value=None, label=DOWNLOAD)
    if name in session.measuring:  # as Save: its file would lack the range (the Train tab's "Done." brings the file)
        return gr.DownloadButton(value=None, label=f"Download {name}.safetensors (once its range is measured)")
    return gr.DownloadButton(value=export_path(backend, session.get(name, library)), label=f"Download {name}.safetensors")


@user_errors
@computed(background=False)
def save_switch(backend: Backend, name: str | None, session: Session, *current: str | None):
    """Save the picked session switch to the library; the message and the pickers (a switch renamed on saving, because
    another page saved one by its name meanwhile, is picked under its new name)."""
    _, library = backend.get(session=session)
    if not name:
        raise ValueError("pick a switch to save")
    if not session.unsaved(name) and library.get(name) is not None:  # saved already (a second click, say)
        return f"'{name}' is already in the library.", *dropdown_updates(session, library, current)
    final, path = session.save(name, library)
    renamed = "" if final == name else f" as '{final}' (another page saved a switch named '{name}' meanwhile)"
    pickers = dropdown_updates(session, library, [final if value == name else value for value in current])
    return f"Saved '{name}'{renamed} to `{path}`; every page of this app now has it (open ones within a few seconds).", *pickers


@user_errors
@computed(background=False)
def delete_switch(backend: Backend, name: str | None, session: Session, *current: str | None):
    """Delete the picked switch if this page made it (:meth:`Session.delete`); the message and the pickers."""
    _, library = backend.get(session=session)
    if not name:
        raise ValueError("pick a switch to delete")
    moved = session.delete(name, library)
    said = (f"Deleted '{name}' from this page (it was not saved)." if moved is None else
            f"Deleted '{name}' from the library: its file is now `{moved}` (move it back into the library folder to have it "
            "again at the next start).")
    return said, *dropdown_updates(session, library, current, emptied=True)  # a picker that held it is left empty


def report_after_delete(session: Session, report: str):
    """The Train tab's report once the switch it is about was deleted: its heading said "'x' is ready — its slider is in
    the Steer tab" above the row's "Deleted 'x'"; it now says so, and the rest (its data, its advice) stays as a record.
    (A switch this page trained is either still its own, unsaved, or one it saved: else it was deleted.)"""
    name = session.reported
    if not report or name is None or session.unsaved(name) or name in session.saved:
        return gr.skip()
    session.reported = None
    rest = report.split("\n", 1)[1] if "\n" in report else ""
    return f"### 🗑 '{name}' was deleted: its slider has left the Steer tab. What its training said:\n{rest}"


def _importable(backend: Backend, switch: Switch, lm: LanguageModel) -> Switch:
    """``switch`` when it can steer ``lm``, stamped with ``lm``'s fingerprint when it has none (so that a library saved
    with it lists it as another model's, not as a broken file, when another model is picked); else what to do instead."""
    made_for = next((n for n, (m, _) in backend.models.items() if m.fingerprint == switch.model_fingerprint), switch.model_name)
    if switch.model_fingerprint and switch.model_fingerprint != lm.fingerprint and made_for in backend.choices():
        raise ValueError(f"'{switch.name}' was made for {made_for}, not {lm.name}: pick {made_for} in the Steer tab's model "
                         f"picker and import it there (to steer {lm.name} with it, transfer it there in the Transfer tab)")
    switch.check_model(lm)
    switch.check_steers("it would not steer anything", fix="train it or import another")
    if not switch.model_fingerprint:
        switch.model_fingerprint, switch.model_name = lm.fingerprint, switch.model_name or lm.name
    return switch


@user_errors
@computed(background=False)
def import_switch(backend: Backend, file: str | None, session: Session, *current: str | None):
    """Upload a ``.safetensors`` switch: validated (format, shape, finiteness, model fingerprint) before it is added."""
    lm, library = backend.get(session=session)
    if not file:
        raise ValueError("no file was uploaded")
    path = Path(uploaded(file, "the switch file"))
    if path.suffix != ".safetensors":
        raise ValueError(f"{path.name} is not a .safetensors switch file")
    switch = _importable(backend, load_switch(path), lm)
    final = session.add(switch, library, name=usable_name(switch.name))  # (named where names are free: a usable form)
    picked = [final if i == MANAGE_PICKER else value for i, value in enumerate(current)]  # Save and download: the new one
    return (f"Imported '{final}' ({switch.positive_label} ↔ {switch.negative_label}); {where_to_steer(session, library, final)}.",
            *slot_updates(session, library), *dropdown_updates(session, library, picked))
