"""Real-browser tests of the web app: Playwright drives Debian's chromium against ``python app.py``.

The tests share one page and run in file order (load → steer → train → inspect → highlight);
each saves a screenshot to ``tests/artifacts/browser-*.png`` (and ``browser-*-failure.png`` when it fails).

Gradio 6's Slider emits ``release`` from ``pointerup`` on its range input (also from ``pointerup`` and
``blur`` on its number box, and from the reset button); keyboard arrows on the range only emit
``input``. So the steer test drags the thumb with the real mouse and checks that the button-up
itself sends the regeneration request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
import torch
from app_server import ARTIFACTS
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, expect, sync_playwright

from lmswitch.core.switch import Switch
from lmswitch.io.resources import examples_dir
from lmswitch.serve.limits import MAX_PROMPT_TOKENS
from lmswitch.webapp.lens import highlight_examples
from lmswitch.webapp.widgets import UNSAVED

pytestmark = [pytest.mark.browser, pytest.mark.real_model, pytest.mark.slow]  # chromium against app.py on the embedded model

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
EXAMPLES = examples_dir()
SWITCHES = ["detox", "formality", "sentiment"]  # the shipped library, in slot order
NEW_SWITCH = "browser-switch"
GENERATE_TIMEOUT = 90_000  # ms; one 40-token generation takes a few seconds on 2 busy cores
TRAIN_TIMEOUT = 180_000
# a transfer loads Gemma (converting its GGUF the first time on a machine) and probes it: past 180 s inside the suite on a
# 2-core AVX2 EPYC, which runs both models in float32 (121 s for the whole test alone, the conversion cached)
TRANSFER_TIMEOUT = 300_000
WATCH_TIMEOUT = 20_000  # ms; a page asks every 5 s whether another page saved or deleted a switch
READY = re.compile(r"ready · \d+ switches")  # not just "ready": the loading message says "as soon as it is ready"



class Ui:
    """The shared page, the page errors seen so far, and failure reports with a screenshot and the server log."""

    def __init__(self, page: Page, server) -> None:
        self.page, self.server = page, server
        self.errors: list[str] = []
        self.other: Page | None = None  # a second user's page (other_page)
        self.joins: list[dict] = []  # bodies of the queue/join requests (one per event the page sends to a Python function)
        page.on("pageerror", lambda err: self.errors.append(f"{err.name}: {err.message}"))
        page.on("request", self._record)

    def _record(self, request) -> None:
        if "/queue/join" in request.url and request.method == "POST":
            with suppress(ValueError, TypeError):
                self.joins.append(json.loads(request.post_data or ""))

    @contextmanager
    def view(self, name: str, screenshot: bool = True) -> Iterator[Page]:
        """Run one test's steps, then save ``browser-<name>.png`` (unless ``screenshot`` is false) and check for page errors.

        On failure the message gets a screenshot path, the page errors and the tail of the server log.
        """
        try:
            yield self.page
        except (AssertionError, PlaywrightError) as err:
            shot = ARTIFACTS / f"browser-{name}-failure.png"
            with suppress(PlaywrightError):
                self.page.screenshot(path=str(shot), full_page=True)
            raise AssertionError(f"{err}\n\nscreenshot: {shot}\npage errors: {self.errors or 'none'}\n"
                                 f"--- app server log (tail) ---\n{self.server.log()}") from err
        if screenshot:
            self.screenshot(name)
        assert not self.errors, f"uncaught errors in the page: {self.errors}"

    def screenshot(self, name: str) -> None:
        self.page.screenshot(path=str(ARTIFACTS / f"browser-{name}.png"), full_page=True)

    def tab(self, name: str):
        """Open a top-level tab and return its (only visible) panel."""
        self.page.get_by_role("tab", name=name, exact=True).click()
        expect(self.page.get_by_role("tab", name=name, exact=True)).to_have_attribute("aria-selected", "true")
        return self.page.get_by_role("tabpanel")

    def other_page(self) -> Page:
        """A second page of the app in the same browser (another user's), opened and loaded on first use; its page errors
        count as the first's."""
        if self.other is None:
            self.other = self.page.context.browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            self.other.on("pageerror", lambda err: self.errors.append(f"other page: {err.name}: {err.message}"))
            self.other.goto(self.server.url)
            expect(self.other.locator("#status")).to_contain_text(READY, timeout=GENERATE_TIMEOUT)
        return self.other

    def close_other_page(self) -> None:
        if self.other is not None:
            self.other.context.close()
            self.other = None

    def slider(self, text: str):
        """The ε slider slot whose label contains ``text``."""
        return self.page.locator("[id^='eps-']").filter(has_text=text)


@pytest.fixture(scope="module")
def ui(app_server) -> Iterator[Ui]:
    assert Path(CHROMIUM).exists(), f"the browser tests need Debian's chromium at {CHROMIUM}: `make test` installs it (apt-get install chromium)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(30_000)
            page.goto(app_server.url)
            yield Ui(page, app_server)
        finally:
            browser.close()


def text_of(page: Page, elem_id: str) -> str:
    return page.locator(f"#{elem_id} textarea").input_value()


def test_page_loads_with_one_slider_per_switch(ui):
    with ui.view("load") as page:
        expect(page.locator("#status")).to_contain_text(READY, timeout=120_000)
        expect(page.locator("#status")).to_contain_text(f"{len(SWITCHES)} switches")
        for i, name in enumerate(SWITCHES):
            slot = page.locator(f"#eps-{i}")
            expect(slot).to_be_visible()
            expect(slot).to_contain_text(f"{name}: + →")
            expect(slot.locator("input[type=range]")).to_have_value("0")
        expect(page.locator(f"#eps-{len(SWITCHES)}")).to_be_hidden()
        expect(page.locator("#prompt textarea")).not_to_have_value("")


def test_dragging_a_slider_regenerates_on_release(ui):
    with ui.view("steer") as page:
        ui.tab("Steer")
        # a baseline at ε = 0 everywhere: steered and unsteered are the same text
        page.locator("#generate").click()
        expect(page.locator("#unsteered-scores")).to_contain_text("perplexity", timeout=GENERATE_TIMEOUT)
        expect(page.locator("#steered-scores")).to_contain_text("perplexity")
        before_steered, before_unsteered = text_of(page, "steered"), text_of(page, "unsteered")
        assert before_unsteered.strip(), "the unsteered output is empty"
        assert before_steered == before_unsteered, "with every ε = 0 the steered text should equal the unsteered one"
        expect(page.locator("#tokens .tokens .tok")).to_have_count(0)

        # drag the sentiment thumb from the middle (ε = 0) to the right end with the real mouse
        slot = ui.slider("sentiment:")
        expect(slot).to_be_visible()
        track = slot.locator("input[type=range]")
        top = track.get_attribute("max")
        box = track.bounding_box()
        assert box, "the sentiment slider has no box"
        y = box["y"] + box["height"] / 2
        page.mouse.move(box["x"] + box["width"] / 2, y)
        page.mouse.down()
        sent_before = len(ui.joins)
        page.mouse.move(box["x"] + box["width"] + 20, y, steps=10)
        expect(track).to_have_value(top)
        expect(slot.locator("input[type=number]")).to_have_value(top)
        assert ui.joins[sent_before:] == [], f"dragging (before the button is up) should not regenerate: {ui.joins[sent_before:]}"
        with page.expect_request(lambda r: "/queue/join" in r.url and r.method == "POST", timeout=10_000) as request:
            page.mouse.up()  # pointerup on the range input → the slider's `release` event
        sent = json.loads(request.value.post_data or "{}")
        assert sent.get("event_data") is not None and float(sent["event_data"]) == float(top), \
            f"the release event should carry the slider value {top}: {sent}"
        assert float(top) in [v for v in sent["data"] if isinstance(v, int | float) and not isinstance(v, bool)], \
            f"the regeneration request should include ε = {top}: {sent}"

        # the per-token view is filled by the stream's last update, so once it shows, the stream is done
        tokens = page.locator("#tokens .tokens .tok")
        expect(tokens.first).to_be_visible(timeout=GENERATE_TIMEOUT)
        expect(page.locator("#steered textarea")).not_to_have_value(before_steered)
        expect(page.locator("#unsteered textarea")).to_have_value(before_unsteered)
        titles = tokens.evaluate_all("spans => spans.map(s => s.getAttribute('title') || '')")
        assert titles and all(t.strip() for t in titles), f"every token needs a tooltip: {titles[:5]}"
        assert any("Δ log p" in t for t in titles), titles[:5]
        after = text_of(page, "steered")
        assert after.strip() and after != before_steered


def test_sliders_beyond_the_fluent_range_toggle(ui):
    with ui.view("wide-sliders") as page:
        ui.tab("Steer")
        track = ui.slider("sentiment:").locator("input[type=range]")
        fluent_top = float(track.get_attribute("max"))
        page.get_by_text("generation settings").click()
        box = page.locator("#wide-sliders input[type=checkbox]")
        box.check()
        expect(page.locator("#wide-warning")).to_contain_text("beyond the fluent range")
        page.wait_for_function("([el, top]) => parseFloat(el.max) > top", arg=[track.element_handle(), fluent_top])
        wide_top = float(track.get_attribute("max"))
        assert wide_top >= 2 * fluent_top, (fluent_top, wide_top)
        page.wait_for_timeout(1500)  # the toggle's own regeneration (at the same values) has shown its first token
        expect(page.locator("#steered-scores")).to_contain_text("perplexity", timeout=GENERATE_TIMEOUT)
        before = text_of(page, "steered")  # so that the text read below is the wide end's, not this one
        track.scroll_into_view_if_needed()
        bounds = track.bounding_box()
        y = bounds["y"] + bounds["height"] / 2
        page.mouse.move(bounds["x"] + bounds["width"] / 2, y)
        page.mouse.down()
        page.mouse.move(bounds["x"] + bounds["width"] + 20, y, steps=10)
        page.mouse.up()  # released at the wide end: generated there
        expect(track).to_have_value(str(int(wide_top)) if wide_top.is_integer() else str(wide_top))
        expect(page.locator("#steered textarea")).not_to_have_value(before, timeout=GENERATE_TIMEOUT)
        expect(page.locator("#steered-scores")).to_contain_text("perplexity", timeout=GENERATE_TIMEOUT)
        expect(page.locator("#tokens .tokens .tok").first).to_be_visible(timeout=GENERATE_TIMEOUT)
        far = text_of(page, "steered")
        box.uncheck()
        expect(page.locator("#wide-warning")).to_be_hidden()
        page.wait_for_function("([el, top]) => parseFloat(el.max) === top", arg=[track.element_handle(), fluent_top])
        assert float(track.input_value()) <= fluent_top  # a value past the fluent end is moved back inside
        # and the text follows the slider: generated again at the value it was moved to
        expect(page.locator("#steered textarea")).not_to_have_value(far, timeout=GENERATE_TIMEOUT)


def test_a_value_typed_in_a_sliders_box_steers_on_enter_and_one_past_its_end_goes_to_the_end(ui):
    """Gradio applies a slider's typed value only when its box loses focus, and sends one past the ends as typed, to be
    refused ("Value 99 is greater than maximum value …") and then shown at the end unsteered by it; one between steps it
    sent while the thumb showed the step, and an empty box failed ("Could not preprocess input component …"):
    sliders.html."""
    with ui.view("typed-eps") as page:
        ui.tab("Steer")
        slot = ui.slider("formality:")
        box, top = slot.locator("input[type=number]"), float(slot.locator("input[type=range]").get_attribute("max"))
        for typed, expected in (("1", 1.0), ("99", top), ("0.3", 0.5), ("", 0.5)):  # (the formality slider's step: 0.5)
            box.fill(typed)
            with page.expect_request(lambda r: "/queue/join" in r.url and r.method == "POST", timeout=10_000) as request:
                box.press("Enter")
            sent = json.loads(request.value.post_data or "{}")
            assert float(sent["event_data"]) == expected and expected in sent["data"], (typed, sent)
            expect(box).to_have_value(f"{expected:g}")
            expect(page.locator("#tokens .tokens .tok").first).to_be_visible(timeout=GENERATE_TIMEOUT)
        expect(page.get_by_text("greater than maximum")).to_have_count(0)
        expect(page.get_by_text("Could not preprocess")).to_have_count(0)
        box.fill("0")
        box.press("Enter")  # leaves formality at 0 for the tests after this one
        expect(box).to_have_value("0")


def test_enter_in_the_seed_box_generates_with_that_seed(ui):
    with ui.view("seed") as page:
        ui.tab("Steer")
        page.locator("#generate").click()
        expect(page.locator("#unsteered-scores")).to_contain_text("perplexity", timeout=GENERATE_TIMEOUT)
        before = text_of(page, "unsteered")
        box = page.locator("#seed input")
        if not box.is_visible():  # an earlier test may have left the accordion open
            page.get_by_text("generation settings").click()
        box.fill("7")
        with page.expect_request(lambda r: "/queue/join" in r.url and r.method == "POST", timeout=10_000) as request:
            box.press("Enter")
        assert 7 in json.loads(request.value.post_data or "{}")["data"], "the request should carry the seed typed"
        expect(page.locator("#unsteered textarea")).not_to_have_value(before, timeout=GENERATE_TIMEOUT)


def test_a_retyped_prompt_keeps_its_text(ui):
    """Retyping a prompt generated before left the page on "generating…" with an older keystroke's first token, 3 times in
    4: the retyped prompt was answered at once from the cache, and then Gradio ended a stopped keystroke's event by
    sending its last outputs again (its partial text; none: empty boxes). Then, in CI, an older keystroke's finished text
    under the retyped prompt: that keystroke had finished just before the last one came, and its event's end came after
    the last one's text (tests/test_app.py: test_a_newer_requests_texts_come_after_the_end_of_an_older_event)."""
    with ui.view("retype", screenshot=False) as page:
        ui.tab("Steer")
        prompt = page.locator("#prompt textarea")
        page.locator("#generate").click()
        expect(page.locator("#steered-scores")).to_contain_text("perplexity", timeout=GENERATE_TIMEOUT)
        before, typed = text_of(page, "steered"), prompt.input_value()
        for _ in range(2):
            prompt.fill("")
            page.wait_for_timeout(1500)
            prompt.press_sequentially(typed, delay=120)  # a generation per keystroke, each stopping the one before
            page.wait_for_timeout(4000)  # the stopped keystrokes' events end meanwhile
            expect(page.locator("#steered-scores")).to_contain_text("perplexity", timeout=GENERATE_TIMEOUT)
            expect(page.locator("#steered textarea")).to_have_value(before)
        # a prompt over the server's limit is refused, and both texts go: they read as the refused prompt's
        prompt.fill("word " * (MAX_PROMPT_TOKENS + 10))
        page.locator("#generate").click()
        expect(page.locator(".toast-body").filter(has_text="shorten it")).to_be_visible(timeout=GENERATE_TIMEOUT)
        for box in ("steered", "unsteered"):
            expect(page.locator(f"#{box} textarea")).to_have_value("")
        prompt.fill(typed)  # the page is the next tests' too: its prompt as it was
        page.locator("#generate").click()
        expect(page.locator("#steered textarea")).to_have_value(before, timeout=GENERATE_TIMEOUT)


def _pick(ui: Ui, panel, label: str, name: str) -> None:
    picker = panel.get_by_label(label, exact=True)
    picker.click()
    # the option in this picker's own list: after a scripted pick the last picker's list can still be open beside it
    block = picker.locator("xpath=ancestor::div[contains(concat(' ', normalize-space(@class), ' '), ' block ')][1]")
    block.get_by_role("option", name=name, exact=True).click()
    expect(picker).to_have_value(name)


def _number(panel, label: str, value: str) -> None:
    box = panel.get_by_label(f"number input for {label}", exact=True)
    box.fill(value)
    box.press("Tab")
    expect(box).to_have_value(value)


def _column(page: Page, table: str, rows: int, column: int = 0) -> list[str]:
    """A column of a results table, once the table has ``rows`` rows (and no more)."""
    cells = page.locator(f"#{table}")
    expect(cells.get_by_test_id(f"cell-{rows - 1}-0")).to_be_visible(timeout=GENERATE_TIMEOUT)
    expect(cells.get_by_test_id(f"cell-{rows}-0")).to_have_count(0)
    return [cells.get_by_test_id(f"cell-{r}-{column}").inner_text().strip() for r in range(rows)]


def test_the_sweep_and_the_composition_map_run_from_their_panels(ui):
    with ui.view("sweep-and-map") as page:
        panel = ui.tab("Steer")
        panel.get_by_text("ε sweep: one switch").click()
        page.wait_for_timeout(300)  # (a value filled during an accordion's first render is lost)
        _pick(ui, panel, "switch", "sentiment")
        panel.get_by_label("ε values", exact=True).fill("-4, 0, 4")
        _number(panel, "samples per ε", "1")
        panel.get_by_role("button", name="Run sweep", exact=True).click()
        assert [float(x) for x in _column(page, "sweep-table", 3)] == [-4.0, 0.0, 4.0]
        assert len(set(_column(page, "sweep-table", 3, column=2))) == 3  # each ε its own text (one seed)
        expect(page.locator("#sweep-plot .js-plotly-plot")).to_contain_text("sentiment")

        panel.get_by_text("composition map: two switches").click()
        page.wait_for_timeout(300)
        _pick(ui, panel, "switch (rows)", "sentiment")
        _pick(ui, panel, "switch (columns)", "detox")
        panel.get_by_label("ε values (rows)", exact=True).fill("0, 3")
        panel.get_by_label("ε values (columns)", exact=True).fill("0, 3")
        _number(panel, "samples per cell", "1")
        panel.get_by_role("button", name="Run composition map", exact=True).click()
        assert [float(x) for x in _column(page, "grid-table", 4)] == [0.0, 0.0, 3.0, 3.0]
        expect(page.locator("#grid-plot .js-plotly-plot")).to_be_visible()
        # the same switch twice is refused in a toast, and the map's last result goes
        _pick(ui, panel, "switch (columns)", "sentiment")
        panel.get_by_role("button", name="Run composition map", exact=True).click()
        expect(page.locator(".toast-body").filter(has_text="two different switches")).to_be_visible(timeout=GENERATE_TIMEOUT)
        expect(page.locator("#grid-plot .js-plotly-plot")).to_have_count(0)


def test_train_from_pasted_sentences_adds_a_slider(ui):
    positive = [line for line in (EXAMPLES / "sentiment_positive.txt").read_text().splitlines() if line.strip()][:12]
    negative = [line for line in (EXAMPLES / "sentiment_negative.txt").read_text().splitlines() if line.strip()][:12]
    with ui.view("train", screenshot=False) as page:
        panel = ui.tab("Train")
        expect(panel.get_by_label("labelled sentences")).to_be_checked()
        negative_label = panel.get_by_label("negative label (−ε)", exact=True)
        expect(negative_label).to_have_attribute("placeholder", "negative")  # what a blank label becomes, by the mode's data
        panel.get_by_label("one document", exact=True).check()
        expect(negative_label).to_have_attribute("placeholder", "unlike the document")
        expect(page.locator("#text-b textarea")).to_be_hidden()
        panel.get_by_label("labelled sentences", exact=True).check()
        expect(negative_label).to_have_attribute("placeholder", "negative")
        panel.get_by_label("name", exact=True).fill(NEW_SWITCH)
        page.locator("#train").click()  # nothing to learn from yet: refused, and the button is on again (it stayed off)
        refusal = page.locator(".toast-body").filter(has_text="is empty")
        expect(refusal).to_be_visible()
        expect(page.locator("#train")).to_be_enabled()
        page.locator(".toast-close").first.click()
        expect(refusal).to_have_count(0)
        page.locator("#text-a textarea").fill("\n".join(positive))
        page.locator("#text-b textarea").fill("\n".join(negative))
        panel.get_by_text("advanced settings").click()
        steps = panel.get_by_label("steps", exact=True)
        expect(steps).to_have_value("200")  # mounted with its default (filling during the accordion's first render is lost)
        page.wait_for_timeout(300)
        steps.fill("30")
        steps.press("Tab")
        expect(steps).to_have_value("30")
        page.locator("#train").click()
        expect(page.locator("#train")).to_be_disabled()  # while it runs: a second click's refusal showed as an Error badge
        status, report = page.locator("#train-status"), page.locator("#train-report")
        expect(status).to_contain_text(re.compile(r"Ready to steer|Done\."), timeout=TRAIN_TIMEOUT)  # its slider is there
        expect(report).to_contain_text("is ready")
        expect(report).to_contain_text(f"'{NEW_SWITCH}'")
        expect(report).to_contain_text("30 loss evaluations")  # (the L-BFGS recipe; it said "steps")

        # steered at once: its slider dragged to the left end (ε −2 while the range is being measured) and released
        ui.tab("Steer")
        slot = ui.slider(f"{NEW_SWITCH}:")
        expect(slot).to_have_count(1)
        expect(slot).to_be_visible()
        expect(slot).to_contain_text(UNSAVED)  # the new switch is this page's alone, until saved
        track = slot.locator("input[type=range]")
        box = track.bounding_box()
        y = box["y"] + box["height"] / 2
        page.mouse.move(box["x"] + box["width"] / 2, y)
        page.mouse.down()
        page.mouse.move(box["x"] - 20, y, steps=10)
        page.mouse.up()
        dragged = float(track.input_value())
        assert dragged < 0, dragged

        # once the range is measured the slider spans it (Switch.slider_range: whole ε inside it), the value moved
        # inside (Gradio refused the value it had, outside the new range, and every slider showed "Error" before)
        expect(status).to_contain_text("Done.", timeout=TRAIN_TIMEOUT)
        expect(page.locator("#train")).to_be_enabled()
        expect(report).to_contain_text("Fluent ε range")
        fluent = re.search(r"range\): ([-+−\d.]+) … ([-+\d.]+)", report.text_content())
        low, high = (float(x.replace("−", "-")) for x in fluent.groups())
        bottom, top = Switch(torch.zeros(1, 1), card={"fluent_eps": [low, high]}).slider_range()
        expect(track).to_have_attribute("max", f"{top:g}")
        expect(track).to_have_attribute("min", f"{bottom:g}")
        expect(track).to_have_value(f"{min(max(dragged, bottom), top):g}")
        expect(slot.locator("input[type=number]")).to_have_value(f"{min(max(dragged, bottom), top):g}")
        expect(slot).not_to_contain_text("being measured")
        for name in SWITCHES:
            expect(ui.slider(f"{name}:")).to_be_visible()
            expect(ui.slider(f"{name}:")).not_to_contain_text(UNSAVED)
        page.locator("#generate").click()  # and steering goes on: no value out of range, no error
        expect(page.locator("#steered-scores")).to_contain_text("perplexity", timeout=GENERATE_TIMEOUT)
        expect(page.locator(".toast-body")).to_have_count(0)
        # a reload would open a new session without the switch, which went silently: the browser asks first
        with page.expect_event("dialog") as asked:
            page.evaluate("() => { setTimeout(() => location.reload(), 0); }")
        assert asked.value.type == "beforeunload"
        asked.value.dismiss()  # stay
        expect(slot).to_contain_text(UNSAVED)
        ui.tab("Train")
        expect(panel.locator("[data-testid=plotly]")).to_have_count(1)  # the loss curve
        ui.screenshot("train")
        expect(page.locator("#status")).to_contain_text(f"{len(SWITCHES)} switches in")
        other = ui.other_page()  # a colleague's page, open before the save
        expect(other.locator("#status")).to_contain_text(f"{len(SWITCHES)} switches in")
        panel.get_by_role("button", name="Save to library", exact=True).click()
        # (the save takes its turn on the compute thread after the colleague's page's first texts: seconds on busy cores)
        expect(panel).to_contain_text(f"Saved '{NEW_SWITCH}'", timeout=GENERATE_TIMEOUT)
        expect(page.locator("#status")).to_contain_text(f"{len(SWITCHES) + 1} switches in")  # the header's count follows
        # and the other page follows the library within a few seconds, without a reload (it never learned of it before)
        expect(other.locator("[id^='eps-']").filter(has_text=f"{NEW_SWITCH}:")).to_be_visible(timeout=WATCH_TIMEOUT)
        expect(other.locator("#status")).to_contain_text(f"{len(SWITCHES) + 1} switches in")
        ui.tab("Steer")
        expect(slot).not_to_contain_text(UNSAVED)  # saved: leaving the page is not questioned any more
        assert page.evaluate("() => window.dispatchEvent(new Event('beforeunload', {cancelable: true}))")
    ui.screenshot("steer-after-training")
    with ui.view("delete", screenshot=False) as page:  # saved from this page: Delete takes it out of the library again
        # the colleague steers with it; once it is deleted, that page's texts are written again without it (they stayed)
        their_slot = other.locator("[id^='eps-']").filter(has_text=f"{NEW_SWITCH}:")
        # the end of its range farther from 0 (a probe can find one side not fluent even at ε 0.5: that end is 0)
        ends = [float(their_slot.locator("input[type=range]").get_attribute(end)) for end in ("min", "max")]
        theirs = their_slot.locator("input[type=number]")
        theirs.fill(f"{max(ends, key=abs):g}")
        theirs.press("Enter")  # (every other slider of that page at 0: steered by it alone)
        expect(other.locator("#steered textarea")).not_to_have_value(text_of(other, "unsteered"), timeout=GENERATE_TIMEOUT)
        expect(other.locator("#steered-scores")).to_contain_text("perplexity", timeout=GENERATE_TIMEOUT)  # (its end)
        panel = ui.tab("Train")
        panel.get_by_role("button", name="Delete", exact=True).click()
        expect(panel).to_contain_text(f"Deleted '{NEW_SWITCH}' from the library")
        report = page.locator("#train-report")  # it said the switch "is ready" above "Deleted"
        expect(report).to_contain_text(f"'{NEW_SWITCH}' was deleted: its slider has left the Steer tab")
        expect(report).not_to_contain_text("is ready")
        # the picker is left empty (it moved to a switch nobody picked), and so is the download
        expect(panel.get_by_label("switch", exact=True)).to_have_value("")
        expect(panel.get_by_role("button", name="Download .safetensors", exact=True)).to_be_visible()
        panel.get_by_role("button", name="Delete", exact=True).click()  # nothing picked: refused, and the row's message
        expect(page.locator(".toast-body").filter(has_text="pick a switch to delete")).to_be_visible()  # of the last
        expect(panel).not_to_contain_text(f"Deleted '{NEW_SWITCH}'")  # success goes (it stood beside the refusal)
        page.locator(".toast-close").first.click()
        expect(page.locator("#status")).to_contain_text(f"{len(SWITCHES)} switches in")
        ui.tab("Steer")
        expect(ui.slider(f"{NEW_SWITCH}:")).to_have_count(0)
        for name in SWITCHES:
            expect(ui.slider(f"{name}:")).to_be_visible()
        expect(other.locator("[id^='eps-']").filter(has_text=f"{NEW_SWITCH}:")).to_have_count(0, timeout=WATCH_TIMEOUT)
        expect(other.locator("#steered textarea")).to_have_value(text_of(other, "unsteered"), timeout=GENERATE_TIMEOUT)
        expect(other.locator("#status")).to_contain_text(f"{len(SWITCHES)} switches in")
        for name in SWITCHES:
            expect(other.locator("[id^='eps-']").filter(has_text=f"{name}:")).to_be_visible()
        ui.close_other_page()


def test_inspect_shows_tables_and_plots(ui):
    with ui.view("inspect") as page:
        panel = ui.tab("Inspect")
        picker = panel.get_by_label("switch", exact=True)
        picker.click()
        page.get_by_role("option", name="sentiment", exact=True).click()
        expect(picker).to_have_value("sentiment")
        panel.get_by_role("button", name="Inspect", exact=True).click()
        expect(panel.locator("[data-testid=plotly]")).to_have_count(2, timeout=GENERATE_TIMEOUT)  # spectrum + word map
        expect(panel.locator(".js-plotly-plot .main-svg").first).to_be_visible()
        # two dataframes (word dimensions, promoted/suppressed words), each with rows now
        expect(panel.get_by_test_id("cell-0-0")).to_have_count(2)
        expect(panel.get_by_test_id("cell-7-0")).to_have_count(2)  # 8 directions; 10 words per pole
        expect(panel.get_by_test_id("cell-9-1")).to_have_count(1)
        expect(panel.get_by_role("columnheader").filter(has_text="raised at +ε")).to_have_count(1)
        expect(panel.get_by_role("gridcell").filter(has_text="%").first).to_be_visible()  # its share of W
        expect(panel.locator(".js-plotly-plot").nth(1)).to_contain_text("sentiment")
        # at their largest the tables are whole on the page: they scrolled inside 500 px boxes, about 12 rows shown
        for label, value in (("directions", "20"), ("words per pole", "30")):
            box = panel.get_by_label(f"number input for {label}", exact=True)
            box.fill(value)
            box.press("Tab")
        panel.get_by_role("button", name="Inspect", exact=True).click()
        expect(panel.get_by_test_id("cell-29-1")).to_have_count(1, timeout=GENERATE_TIMEOUT)
        expect(panel.get_by_test_id("cell-19-0")).to_have_count(2)
        for table in panel.locator("table").all():
            scroller = table.evaluate_handle("t => { let e = t; while (e && e.scrollHeight <= e.clientHeight + 1) e = e.parentElement; return e }")
            assert scroller.evaluate("e => e === null || e === document.scrollingElement || e.tagName === 'BODY'"), "a table scrolls in a box"


def test_highlight_finds_the_insult_of_the_first_example(ui):
    with ui.view("highlight") as page:
        panel = ui.tab("Highlight")
        panel.get_by_test_id("dataset-cell-0-0").click()
        expect(page.locator("#hl-text textarea")).to_have_value(re.compile("pathetic idiot"))
        expect(panel.get_by_label("switch", exact=True)).to_have_value("detox")
        expect(panel.locator("input[type=number]").first).to_have_value(f"{highlight_examples()[0][2]:g}")  # its ε
        page.locator("#highlight").click()
        span = page.locator("#hl-spans .token.highlighted")
        expect(span.first).to_be_visible(timeout=GENERATE_TIMEOUT)
        expect(span.first).to_have_text(re.compile(r"pathetic|idiot|id\s*iot"))
        expect(page.locator("#hl-spans")).to_contain_text("toxic")  # the legend: the switch's negative side
        expect(page.locator("#hl-heatmap .token").first).to_be_visible()
        expect(panel.locator("[data-testid=plotly]")).to_have_count(1)  # the style meter
        expect(panel.locator(".js-plotly-plot")).to_contain_text("detox")
        # a refused input (the text cleared) is said in a toast, and the last result goes: it stayed beside the new text
        # (marked by an "Error" badge on the spans alone), read as its result once the toast went
        page.locator("#hl-text textarea").fill("")
        page.locator("#highlight").click()
        expect(page.locator(".toast-body").filter(has_text="empty")).to_be_visible(timeout=GENERATE_TIMEOUT)
        expect(page.locator("#hl-heatmap .token")).to_have_count(0)
        expect(page.locator("#hl-spans .token")).to_have_count(0)
        expect(panel.locator(".js-plotly-plot")).to_have_count(0)
        expect(panel).not_to_contain_text("Spans toward")


def test_transfer_panel_moves_a_switch_to_gemma_and_steers_it(ui):
    """Runs last: it switches this page's session to Gemma-3-270M. The Inspect tab's tables of the embedded model's
    switch are emptied then (they stayed, under a picker of Gemma's switches)."""
    with ui.view("transfer") as page:
        inspect = ui.tab("Inspect")
        inspect.get_by_role("button", name="Inspect", exact=True).click()
        expect(inspect.get_by_test_id("cell-0-0")).to_have_count(2, timeout=GENERATE_TIMEOUT)
        ui.tab("Steer")
        before = text_of(page, "unsteered")
        panel = ui.tab("Transfer")
        picker = panel.get_by_label("switch (of the current model)", exact=True)
        picker.click()
        page.get_by_role("option", name="sentiment", exact=True).click()
        expect(panel.get_by_label("target model", exact=True)).to_have_value("gemma3-270m")
        page.locator("#transfer").click()
        expect(page.locator("#transfer-report")).to_contain_text("steers gemma3-270m", timeout=TRANSFER_TIMEOUT)
        expect(page.locator("#status")).to_contain_text("gemma3-270m")
        ui.tab("Steer")
        expect(page.locator("#model input")).to_have_value("gemma3-270m")
        slot = ui.slider("sentiment-to-gemma3-270m:")
        expect(slot).to_be_visible()
        assert float(slot.locator("input[type=number]").input_value()) > 0  # at its recommended ε
        expect(ui.slider("detox:")).to_have_count(0)  # the embedded model's switches are not offered for Gemma
        expect(page.locator("#unsteered textarea")).not_to_have_value(before, timeout=GENERATE_TIMEOUT)  # Gemma's own text now
        expect(page.locator("#steered-scores")).to_contain_text("perplexity", timeout=GENERATE_TIMEOUT)
        expect(page.locator("#tokens .tokens .tok").first).to_be_visible(timeout=GENERATE_TIMEOUT)  # a steered Gemma generation
        inspect = ui.tab("Inspect")
        expect(inspect.get_by_test_id("cell-0-0")).to_have_count(0)
        expect(inspect.locator(".js-plotly-plot")).to_have_count(0)
