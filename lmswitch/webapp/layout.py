"""The page: one builder per tab (components only), then the wiring of events to handlers."""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from lmswitch.core.options import DEFAULT_PROMPT, GUIDE_TOKENS, MAX_BEST_OF, MAX_GUIDE, SAMPLING, SEED, TrainConfig
from lmswitch.core.solver import RECIPES
from lmswitch.core.steering import MAX_ABS_EPS
from lmswitch.io.documents import MAX_DOCUMENT_BYTES, SUPPORTED
from lmswitch.lenses.options import DEFAULT_EPS, DEFAULT_MAX_SPAN, DEFAULT_SPANS
from lmswitch.lenses.svd import RARE_NOTE
from lmswitch.serve.limits import MAX_NEW_TOKENS, MAX_TRAIN_STEPS
from lmswitch.serve.session import Session
from lmswitch.webapp import lens, steer, train
from lmswitch.webapp.backend import Backend
from lmswitch.webapp.widgets import GUARD_ON, LIBRARY_WATCH_S, MAX_SLOTS, token_html

DOCUMENT_TYPES = list(SUPPORTED)  # what the upload boxes offer: what the document reader reads
CSS_PATH = Path(__file__).with_name("app.css")  # the page's styles (token colours, legend), shipped with the package
HEAD_PATH = Path(__file__).with_name("sliders.html")  # a slider's number box: Enter applies it, a value past its ends goes to the end
TRAIN = TrainConfig()  # the Train tab's defaults


def _picker(shipped: list[str], label: str = "switch") -> gr.Dropdown:
    return gr.Dropdown(label=label, choices=shipped, value="", allow_custom_value=True)


def _steer_tab(ui: SimpleNamespace, backend: Backend) -> None:
    with gr.Row():
        with gr.Column(scale=2, min_width=320):
            ui.model_pick = gr.Dropdown(backend.choices(), value=backend.model_name, label="model", elem_id="model",
                                        info="bundled models load (and convert, the first time) when picked")
            ui.prompt = gr.Textbox(label="prompt", value=DEFAULT_PROMPT, lines=3, elem_id="prompt")
            # hidden until the page loads; each visitor's ranges are set then (API clients may use any |ε| ≤ 1000)
            ui.sliders = [gr.Slider(-MAX_ABS_EPS, MAX_ABS_EPS, value=0, step=0.5, label=f"switch {i + 1}", visible=False, elem_id=f"eps-{i}")
                          for i in range(MAX_SLOTS)]
            with gr.Accordion("generation settings", open=False):
                ui.gen = [gr.Slider(1, MAX_NEW_TOKENS, value=SAMPLING.max_new_tokens, step=1, label="max new tokens"),
                          gr.Slider(0, 2, value=SAMPLING.temperature, step=0.05, label="temperature", info="0 = greedy"),
                          gr.Slider(0.05, 1.0, value=SAMPLING.top_p, step=0.05, label="top-p"),
                          gr.Number(value=SEED, precision=0, minimum=0, label="seed", elem_id="seed", info="Enter: generate with it"),
                          gr.Checkbox(value=SAMPLING.chat, label="chat template")]
                ui.adaptive = gr.Checkbox(value=SAMPLING.adaptive, label="adaptive strength",
                                          info=f"steer each generation until the switch has changed it by {SAMPLING.generation_budget:g} "
                                               "nats, then let the model write: strong settings stay fluent", elem_id="adaptive")
                ui.best_of = gr.Slider(1, MAX_BEST_OF, value=SAMPLING.best_of, step=1, label="best of", elem_id="best-of",
                                       info="sample this many texts and show the one the steered model finds likeliest "
                                            "(less toxic with detox; shown when all are done)")
                ui.guide = gr.Slider(1, MAX_GUIDE, value=SAMPLING.guide, step=1, label="guided", elem_id="guide",
                                     info=f"every {GUIDE_TOKENS} tokens, write this many candidates and keep the one the switch's "
                                          "judge finds furthest the way ε points: a mild ε goes much further, without loops "
                                          "(1 = off; shown when all are done)")
                ui.repeat_guard = gr.Checkbox(value=GUARD_ON, label="repeat guard", elem_id="repeat-guard",
                                              info=f"steering may not push a word the text wrote in its last {SAMPLING.repeat_guard} "
                                                   "tokens (no \"great great great\"); off: the paper's plain steering")
                ui.wide = gr.Checkbox(value=False, label="sliders beyond the fluent range", elem_id="wide-sliders",
                                      info="each slider reaches twice as far; past a switch's fluent ε text reads less well")
            ui.wide_warning = gr.Markdown("", visible=False, elem_id="wide-warning")
            ui.go = gr.Button("Generate", variant="primary", elem_id="generate")
        with gr.Column(scale=3):
            with gr.Row(equal_height=True):
                with gr.Column():
                    ui.steered = gr.Textbox(label="steered", lines=7, interactive=False, elem_id="steered")
                    ui.steered_scores = gr.Markdown(elem_id="steered-scores")
                with gr.Column():
                    ui.base = gr.Textbox(label="unsteered (every ε = 0, same seed)", lines=7, interactive=False, elem_id="unsteered")
                    ui.base_scores = gr.Markdown(elem_id="unsteered-scores")
            ui.tokens = gr.HTML(token_html(None), elem_id="tokens")


def _sweep_and_map(ui: SimpleNamespace, shipped: list[str]) -> None:
    with gr.Accordion("ε sweep: one switch, a row of ε values, one batched call", open=False):
        with gr.Row():
            ui.sweep_switch = _picker(shipped)
            ui.sweep_eps = gr.Textbox("", label="ε values", placeholder="empty: 7 values over the switch's range, 0 among them; or e.g. -10, -5, 0, 5, 10")
            ui.sweep_samples = gr.Slider(1, 8, value=3, step=1, label="samples per ε")
        ui.sweep_go = gr.Button("Run sweep")
        ui.sweep_plot = gr.Plot(label="scores vs ε", elem_id="sweep-plot")
        ui.sweep_table = gr.Dataframe(headers=["ε", "sample", "text", "sentiment", "toxicity"], wrap=True, interactive=False, elem_id="sweep-table",
                                      column_widths=["8%", "8%", "64%", "10%", "10%"])  # the text wraps; the scores stay in view
    with gr.Accordion("composition map: two switches on a 2-D grid of ε", open=False):
        with gr.Row():
            ui.grid_a, ui.grid_b = _picker(shipped, "switch (rows)"), _picker(shipped, "switch (columns)")
            ui.grid_samples = gr.Slider(1, 4, value=2, step=1, label="samples per cell")
        with gr.Row():
            ui.grid_eps_a = gr.Textbox("", label="ε values (rows)", placeholder="empty: 5 values over the range, 0 among them")
            ui.grid_eps_b = gr.Textbox("", label="ε values (columns)", placeholder="empty: 5 values over the range, 0 among them")
        ui.grid_go = gr.Button("Run composition map")
        ui.grid_plot = gr.Plot(label="scores over the grid (hover a cell for a sample)", elem_id="grid-plot")
        ui.grid_table = gr.Dataframe(headers=["ε rows", "ε columns", "sample", "text", "sentiment", "toxicity"], wrap=True, interactive=False, elem_id="grid-table",
                                     column_widths=["8%", "9%", "7%", "56%", "10%", "10%"])


def _train_inputs(ui: SimpleNamespace) -> None:
    with gr.Row():
        mode = train.MODES[2]
        ui.mode = gr.Radio(list(train.MODES), value=mode, label="what to learn from")
        ui.new_name = gr.Textbox(label="name", value="my-switch", max_lines=1)
        shown = train.mode_widgets(mode)  # a blank label is the data's; the placeholders follow the mode (train.mode_changed)
        ui.pos_label = gr.Textbox("", label="positive label (+ε)", placeholder=shown.positive_placeholder, max_lines=1)
        ui.neg_label = gr.Textbox("", label="negative label (−ε)", placeholder=shown.negative_placeholder, max_lines=1)
    upload = f"…or upload .txt .md .html .pdf .docx ({MAX_DOCUMENT_BYTES // 2**20} MB max)"
    with gr.Row():
        with gr.Column():
            ui.text_a = gr.Textbox("", label=shown.text_a, lines=10, elem_id="text-a")
            ui.file_a = gr.File(label=upload, file_types=DOCUMENT_TYPES, type="filepath")
        with gr.Column(visible=shown.side_b) as ui.side_b:
            ui.text_b = gr.Textbox("", label=shown.text_b, lines=10, elem_id="text-b")
            ui.file_b = gr.File(label=upload, file_types=DOCUMENT_TYPES, type="filepath")
    with gr.Accordion("advanced settings", open=False), gr.Row():
        ui.train_settings = [gr.Number(value=TRAIN.steps, precision=0, minimum=1, maximum=MAX_TRAIN_STEPS, label="steps",
                                       info="the most to run; training stops sooner when its held-out loss does (the default "
                                            f"L-BFGS counts loss evaluations and plans at most {RECIPES[TRAIN.optimizer].planned()})"),
                             gr.Number(value=TRAIN.lr, minimum=1e-5, maximum=1.0, label="learning rate",
                                       info="Adam's, for models whose logits are scaled after the head; the default L-BFGS training ignores it"),
                             gr.Number(value=TRAIN.eps0, minimum=1e-6, maximum=1.0, label="ε0 (ε unit)"),
                             gr.Number(value=TRAIN.rank or 0, precision=0, minimum=0, label="rank (0 = full)"),
                             gr.Number(value=TRAIN.seed, precision=0, minimum=0, label="seed")]


def _train_tab(ui: SimpleNamespace, shipped: list[str]) -> None:
    _train_inputs(ui)
    with gr.Row():
        ui.train_go = gr.Button("Train", variant="primary", elem_id="train")
        ui.cancel = gr.Button("Cancel", variant="stop")
    ui.train_status = gr.Markdown(elem_id="train-status")
    ui.loss_plot = gr.Plot(label="training loss")
    ui.train_report = gr.Markdown(elem_id="train-report")
    ui.train_learned = gr.Markdown(elem_id="train-learned", label="what it learned")
    with gr.Accordion("your switches: save to the library, delete, download, import", open=True):
        with gr.Row():
            ui.manage = _picker(shipped)
            ui.save = gr.Button("Save to library")
            ui.delete = gr.Button("Delete")
            ui.download = gr.DownloadButton(train.DOWNLOAD, value=None)
            ui.upload = gr.UploadButton("Import .safetensors", file_types=[".safetensors"], type="filepath")
        ui.manage_status = gr.Markdown()


TABLE_HEIGHT = 1600  # px: the Inspect tab's word table at its largest (30 words) whole on the page, not in a scrolling
# box (Gradio's default height, 500 px, showed about 12 rows); the directions' table, 20 rows of up to 30 words a pole,
# ~150 px each, gets more
DIRECTIONS_HEIGHT = 4000


def _inspect_tab(ui: SimpleNamespace, shipped: list[str]) -> None:
    with gr.Row():
        ui.inspect_name = _picker(shipped)
        ui.dims = gr.Slider(1, 20, value=8, step=1, label="directions")
        ui.words = gr.Slider(5, 30, value=10, step=1, label="words per pole")
        ui.inspect_go = gr.Button("Inspect", variant="primary")
    ui.svd_table = gr.Dataframe(headers=["dir", "σ", "share of W", "raised at +ε", "lowered at +ε", "agreement"],
                                wrap=True, interactive=False, column_widths=["5%", "7%", "8%", "35%", "35%", "10%"], max_height=DIRECTIONS_HEIGHT,
                                label=f"word directions of W (share: of ‖W‖²; agreement: the share of reference contexts where "
                                      f"the direction moves its words this way round; {RARE_NOTE})")
    with gr.Row():
        ui.spectrum = gr.Plot(label="singular values")
        ui.scatter = gr.Plot(label="words on the top two directions")
    ui.word_table = gr.Dataframe(headers=["#", "most promoted at +ε", "Δ logit", "most suppressed", "Δ logit"], interactive=False,
                                 max_height=TABLE_HEIGHT, label=f"words by their mean logit change ({RARE_NOTE})")


def _transfer_tab(ui: SimpleNamespace, backend: Backend, shipped: list[str]) -> None:
    gr.Markdown("Map a switch to another model: a linear map between the two models' output embeddings, fitted on "
                "the words both vocabularies share (`lmswitch.core.transfer`, paper §5.3). The transferred switch then "
                "steers the target model in the Steer tab; its fluent ε range is probed on the target first, and its slider spans it.")
    with gr.Row():
        ui.tr_switch = _picker(shipped, "switch (of the current model)")
        ui.tr_target = steer.target_picker(backend, backend.model_name, label="target model")
        ui.tr_go = gr.Button("Transfer", variant="primary", elem_id="transfer")
    ui.tr_report = gr.Markdown(elem_id="transfer-report")


def _highlight_tab(ui: SimpleNamespace, shipped: list[str]) -> None:
    with gr.Row():
        with gr.Column(scale=3):
            ui.hl_text = gr.Textbox("", label="text", lines=6, elem_id="hl-text")
            ui.hl_file = gr.File(label="…or upload a document", file_types=DOCUMENT_TYPES, type="filepath")
        with gr.Column(scale=2):
            ui.hl_switch = _picker(shipped)
            ui.hl_settings = [gr.Slider(-30, 30, value=-DEFAULT_EPS, step=0.5, label="ε (negative: find the switch's negative side)"),
                              gr.Slider(1, 20, value=DEFAULT_MAX_SPAN, step=1, label="max span (tokens)"),
                              gr.Slider(1, 5, value=DEFAULT_SPANS, step=1, label="number of spans")]
            ui.hl_go = gr.Button("Highlight", variant="primary", elem_id="highlight")
    gr.Examples(lens.highlight_examples(), inputs=[ui.hl_text, ui.hl_switch, *ui.hl_settings], label="examples (toxic comments, a mixed review, mixed registers)")
    ui.hl_spans = gr.HighlightedText(label="most style-indicative span(s)", elem_id="hl-spans", show_legend=True)
    ui.hl_heat = gr.HighlightedText(label="per-token contribution (red: toward the chosen side)", elem_id="hl-heatmap")
    with gr.Row():
        ui.meter_plot = gr.Plot(label="style meter: log-likelihood vs ε")
        ui.hl_summary = gr.Markdown()


def _wire_steer(ui: SimpleNamespace, backend: Backend, demo: gr.Blocks) -> None:
    bind = functools.partial
    live = dict(concurrency_id="generate", concurrency_limit=4, trigger_mode="multiple", show_progress="hidden")
    ui.regenerate = dict(fn=bind(steer.steer, backend), api_visibility="private", **live,  # every event writing the texts
                         inputs=[ui.prompt, *ui.gen, ui.session, *ui.sliders, ui.adaptive, ui.best_of, ui.guide, ui.repeat_guard],
                         outputs=[ui.steered, ui.base, ui.steered_scores, ui.base_scores, ui.tokens])
    loaded = demo.load(bind(steer.on_load, backend), [ui.session, *ui.pickers], [ui.status, *ui.sliders, *ui.pickers],
                       api_visibility="private", concurrency_limit=None)
    _regenerating(loaded.then, ui)  # a first generation to look at
    # another page saved or deleted a switch: its slider and picker entries come and go here too, within a few seconds
    gr.Timer(LIBRARY_WATCH_S).tick(bind(steer.library_watch, backend), [ui.session, *ui.sliders, *ui.pickers],
                                   [ui.status, *ui.sliders, *ui.pickers, ui.rewrite], api_visibility="private", queue=False,
                                   show_progress="hidden")
    _regenerating(ui.rewrite.change, ui)  # the texts of a switch another page deleted are written again without it
    _regenerating(ui.go.click, ui, api_name="steer", api_visibility="public")
    _regenerating(ui.prompt.input, ui)
    _regenerating(ui.gen[3].submit, ui)  # Enter in the seed box
    for slider in ui.sliders:
        _regenerating(slider.release, ui)
    _regenerating(ui.wide.change(bind(steer.widen_sliders, backend), [ui.wide, ui.session, *ui.sliders], [ui.wide_warning, *ui.sliders],
                                 api_visibility="private", concurrency_limit=None).then, ui)  # a moved slider's text
    picked = ui.model_pick.input(bind(steer.select_model, backend), [ui.model_pick, ui.session, *ui.pickers],
                                 [ui.status, *ui.sliders, *ui.pickers, ui.tr_target], api_name="select_model", show_progress_on=[ui.status])
    _regenerating(picked.then, ui)
    moved = ui.tr_go.click(bind(steer.run_transfer, backend), [ui.tr_switch, ui.tr_target, ui.session, *ui.pickers],
                           [ui.tr_report, ui.model_pick, ui.status, *ui.sliders, *ui.pickers, ui.tr_target], api_name="transfer",
                           show_progress_on=[ui.tr_report])
    _regenerating(moved.then, ui)
    ui.model_changes = [picked, moved]
    batch = dict(concurrency_id="generate", concurrency_limit=4)
    ui.api_go.click(bind(steer.generate_api, backend), [ui.prompt, ui.api_switches, *ui.gen, ui.session, ui.adaptive, ui.best_of, ui.guide,
                                                        ui.repeat_guard],
                    ui.api_result,
                    api_name="generate", **batch)
    sweep = ui.sweep_go.click(bind(steer.run_sweep, backend), [ui.sweep_switch, ui.sweep_eps, ui.sweep_samples, ui.prompt, *ui.gen,
                                                               ui.session, ui.adaptive, ui.best_of, ui.guide, ui.repeat_guard],
                              [ui.sweep_plot, ui.sweep_table], api_name="sweep", show_progress_on=[ui.sweep_plot], **batch)
    grid = ui.grid_go.click(bind(steer.run_grid, backend), [ui.grid_a, ui.grid_b, ui.grid_eps_a, ui.grid_eps_b, ui.grid_samples, ui.prompt,
                                                             *ui.gen, ui.session, ui.adaptive, ui.best_of, ui.guide, ui.repeat_guard],
                            [ui.grid_plot, ui.grid_table], api_name="compose", show_progress_on=[ui.grid_plot], **batch)
    ui.results = [_emptied_on_refusal(sweep, [ui.sweep_plot, ui.sweep_table]),  # read with the page's model
                  _emptied_on_refusal(grid, [ui.grid_plot, ui.grid_table])]  # (_wire_model_change)


def _wire_train_and_lenses(ui: SimpleNamespace, backend: Backend) -> None:
    bind = functools.partial
    ui.mode.change(train.mode_changed, ui.mode, [ui.side_b, ui.pos_label, ui.neg_label, ui.text_a, ui.text_b], api_visibility="private",
                   queue=False)
    # the Train button is off while its run lasts (a second click's refusal covered the running one's status with an Error
    # badge); a script calling /train meanwhile is still refused with a message
    button = dict(inputs=None, outputs=ui.train_go, api_visibility="private", queue=False)
    trained = ui.train_go.click(lambda: gr.Button(interactive=False), **button).then(
        bind(train.train, backend), [ui.mode, ui.new_name, ui.pos_label, ui.neg_label, ui.text_a, ui.file_a, ui.text_b,
                                     ui.file_b, *ui.train_settings, ui.session, *ui.pickers],
        [ui.train_status, ui.loss_plot, ui.train_report, *ui.sliders, *ui.pickers, ui.download, ui.train_learned],
        api_name="train", concurrency_id="train", concurrency_limit=2, show_progress_on=[ui.train_status])
    trained.failure(lambda: gr.Button(interactive=True), **button)  # (Gradio's .then does not follow a failed event)
    trained.success(lambda: gr.Button(interactive=True), **button)
    refreshed = trained.then(bind(steer.refresh_sliders, backend), [ui.session, *ui.sliders], ui.sliders, api_visibility="private", queue=False)
    _regenerating(refreshed.then, ui)  # the text of a value moved into the new range (unchanged: the session's cache answers at once)
    ui.cancel.click(train.cancel_training, ui.session, ui.train_status, api_name="cancel_training", concurrency_limit=None, queue=False)
    ui.manage.change(bind(train.export_switch, backend), [ui.manage, ui.session], ui.download, api_visibility="private")
    # show_progress_on: one output shows the progress, or on a refusal Gradio's "Error" badge, where all of them did
    # saved, or deleted (a switch this page made: unsaved, it leaves the page; saved from here, its file goes to the
    # library's .trash): then the sliders and the status line's count are drawn again
    # each first empties the row's message: a refusal (a toast, and the row's "Error" badge) showed beside the last success
    clear = dict(fn=lambda: "", inputs=None, outputs=ui.manage_status, api_visibility="private", queue=False)
    for button, handler in ((ui.save, train.save_switch), (ui.delete, train.delete_switch)):
        done = button.click(**clear).then(bind(handler, backend), [ui.manage, ui.session, *ui.pickers], [ui.manage_status, *ui.pickers],
                                          api_name=handler.__name__, show_progress_on=[ui.manage_status])
        done.then(bind(steer.refresh_sliders, backend), [ui.session, *ui.sliders], ui.sliders, api_visibility="private", queue=False).then(
            bind(steer.model_status, backend), ui.session, ui.status, api_visibility="private", queue=False)
        if handler is train.delete_switch:  # the report on a switch just deleted said it "is ready" above "Deleted"
            done.success(train.report_after_delete, [ui.session, ui.train_report], ui.train_report,
                         api_visibility="private", queue=False)
    ui.upload.upload(**clear).then(bind(train.import_switch, backend), [ui.upload, ui.session, *ui.pickers],
                                   [ui.manage_status, *ui.sliders, *ui.pickers], api_name="import_switch", show_progress_on=[ui.manage_status])
    inspected = ui.inspect_go.click(bind(lens.inspect_switch, backend), [ui.inspect_name, ui.dims, ui.words, ui.session],
                                    [ui.svd_table, ui.spectrum, ui.scatter, ui.word_table], api_name="inspect",
                                    show_progress_on=[ui.svd_table])
    highlighted = ui.hl_go.click(bind(lens.run_highlight, backend), [ui.hl_text, ui.hl_file, ui.hl_switch, *ui.hl_settings, ui.session],
                                 [ui.hl_spans, ui.hl_heat, ui.meter_plot, ui.hl_summary], api_name="highlight", show_progress_on=[ui.hl_spans])
    ui.results += [_emptied_on_refusal(inspected, [ui.svd_table, ui.spectrum, ui.scatter, ui.word_table]),
                   _emptied_on_refusal(highlighted, [ui.hl_spans, ui.hl_heat, ui.meter_plot, ui.hl_summary])]


def _regenerating(listener, ui: SimpleNamespace, **given):
    """``listener`` (an event method: ``ui.go.click``, an event's ``.then``) set to write the Steer tab's texts
    (``ui.regenerate``, with ``given`` over it); a refused request (a prompt over the server's limit) empties them, since
    the last ones would read as the refused request's."""
    return _emptied_on_refusal(listener(**{**ui.regenerate, **given}), ui.regenerate["outputs"])


def _emptied_on_refusal(event, outputs: list):
    """``event``, whose outputs are emptied when it is refused: the last result stayed beside the refusal's toast (a
    text over the limit kept the spans of the one before), and once the toast went it read as the new input's."""
    event.failure(lambda: [None] * len(outputs), None, outputs, api_visibility="private", queue=False)
    return event


def _wire_model_change(ui: SimpleNamespace) -> None:
    """Results read with the model the page steered before (Inspect, Highlight, the sweep and map) are emptied once
    it changes, and any of them still running is cancelled (it would fill them in afterwards)."""
    stale = [ui.svd_table, ui.spectrum, ui.scatter, ui.word_table, ui.hl_spans, ui.hl_heat, ui.meter_plot, ui.hl_summary,
             ui.sweep_plot, ui.sweep_table, ui.grid_plot, ui.grid_table]
    for change in ui.model_changes:
        change.success(lambda: [None] * len(stale), None, stale, cancels=ui.results, api_visibility="private", queue=False)


def _tabs(ui: SimpleNamespace, backend: Backend, shipped: list[str]) -> None:
    with gr.Tabs():
        with gr.Tab("Steer", id="steer"):
            _steer_tab(ui, backend)
            _sweep_and_map(ui, shipped)
        with gr.Tab("Train", id="train"):
            _train_tab(ui, shipped)
        with gr.Tab("Inspect", id="inspect"):
            _inspect_tab(ui, shipped)
        with gr.Tab("Transfer", id="transfer"):
            _transfer_tab(ui, backend, shipped)
        with gr.Tab("Highlight", id="highlight"):
            _highlight_tab(ui, shipped)


def build_app(backend: Backend) -> gr.Blocks:
    """The whole page for ``backend``: components, then events wired to the handlers of ``steer``, ``train`` and ``lens``."""
    shipped = sorted(p.stem for p in backend.folder.glob("*.safetensors")) if backend.folder and backend.folder.is_dir() else []
    ui = SimpleNamespace()
    with gr.Blocks(title="lmswitch", analytics_enabled=False) as demo:
        ui.session = gr.State(Session())  # deep-copied into a fresh Session per visitor
        # set by the library watch when the Steer tab's texts must be written again (a hidden component, not a State: a
        # State's change does not fire from the watch's unqueued event)
        ui.rewrite = gr.Number(0.0, visible=False)
        gr.Markdown("# lmswitch <small>steer a language model with LM-Switch</small>", elem_id="title")
        ui.status = gr.Markdown(f"⏳ Loading the model **{backend.model_name}** and the switches… the controls appear as soon as it has "
                                "loaded.", elem_id="status")
        _tabs(ui, backend, shipped)
        # hidden inputs/outputs of the scripting endpoint
        ui.api_switches = gr.Textbox("", label="switches", visible=False)
        ui.api_result = gr.JSON(label="result", visible=False)
        ui.api_go = gr.Button(visible=False)

        def app_status() -> dict:
            """Whether the model is loaded, and the switches in the library folder."""
            return backend.status()

        gr.api(app_status, api_name="status", queue=False)
        ui.pickers = [ui.sweep_switch, ui.grid_a, ui.grid_b, ui.manage, ui.inspect_name, ui.hl_switch, ui.tr_switch]
        _wire_steer(ui, backend, demo)
        _wire_train_and_lenses(ui, backend)
        _wire_model_change(ui)
        demo.unload(_on_close(demo, ui.session, backend))
    return demo


def _on_close(demo: gr.Blocks, state: gr.State, backend: Backend):
    """The unload event: when a page or API client goes away, its running generation stops (``Session.stop_generation``:
    a guided or best-of decode would otherwise hold other users' compute to its end) and its unsaved switches move to
    disk (``Session.spill``); when the server is stopping (every page's handler runs then) its training stops instead.

    Gradio keeps a closed session (the app's ``Session`` is never an event output, so it has no time to live) until
    its limit of sessions pushes it out, in case the same client comes back; the switches need not take memory
    meanwhile, and their files go with the session (``Session``'s finalizer). Gradio has no public way to read a state
    from an unload event, so this looks the session up in the Blocks' state holder (tests/test_app.py checks it on a
    launched app).
    """
    def page_closed(request: gr.Request) -> None:
        states = demo.state_holder.session_data.get(request.session_hash)
        session = states.get(state._id) if states is not None else None
        if isinstance(session, Session):
            session.stop_generation()
            if backend.stopping.is_set():  # every page closes at a stop, the folder goes with the process, and a training
                session.cancel_training()  # would be lost with it: the server waited for it (up to Gradio's 5 s)
            else:
                session.spill(backend.spool_dir)

    return page_closed
