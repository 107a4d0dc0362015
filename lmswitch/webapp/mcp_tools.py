"""MCP tools (``python app.py --mcp``): steer, train from text, highlight and measure, as typed functions with descriptions.

Gradio's MCP server lists every named endpoint as a tool. The app's page endpoints
take widget values (twelve slider slots, file pickers…), so with ``--mcp`` they are
kept off the tool list and these functions are registered instead (``gr.api``:
the type hints give each parameter's type, the docstrings the descriptions).
Switches trained over MCP live in one server-side session shared by MCP clients,
so later calls can use them by name; they are never written to the switch folder.
Each tool answers with JSON text.
"""

from __future__ import annotations

import functools
import json
import warnings
from collections.abc import Callable

import gradio as gr

from lmswitch.core.options import SAMPLING, SEED, TrainConfig
from lmswitch.core.train import advise_on_data, train_switch
from lmswitch.io.parse import parse_names
from lmswitch.lenses.meter import measure
from lmswitch.lenses.options import DEFAULT_EPS, DEFAULT_SPANS
from lmswitch.lenses.spans import highlight
from lmswitch.lenses.svd import promoted_words
from lmswitch.serve.limits import (
    MAX_HIGHLIGHT_CHARS,
    MAX_METER_CHARS,
    MAX_METER_SWITCHES,
    MAX_NEW_TOKENS,
    MAX_PROMPT_TOKENS,
    MAX_TRAIN_STEPS,
    check_train_steps,
)
from lmswitch.serve.session import MAX_SESSION_SWITCHES, Session, check_name
from lmswitch.webapp.backend import Backend, user_errors
from lmswitch.webapp.steer import generate_api
from lmswitch.webapp.train import MODES, training_data

TOOLS = ("list_switches", "steer_text", "train_from_text", "highlight_text", "measure_style")
TRAIN_MODES = {"one document": MODES[0], "two documents": MODES[1], "sentences": MODES[2]}
SHOWN_WORDS = 10
STATE_WARNING = "This MCP server includes a tool that has a gr.State input"  # (gradio.mcp, at launch)


def _switch_summary(switch) -> dict:
    card = switch.card
    return {"name": switch.name, "description": switch.description, "positive": switch.positive_label,
            "negative": switch.negative_label, "fluent_eps": list(card.fluent_eps) if card.fluent_eps else None,
            "recommended_eps": card.recommended_eps,
            **({"calibration_error": card.calibration_error} if card.calibration_error else {})}


def _as_json(fn: Callable[..., dict]) -> Callable[..., str]:
    """``fn`` returning its result as JSON text (Gradio's MCP server would send a dict as Python's repr)."""

    @functools.wraps(fn)
    def call(*args, **kwargs) -> str:
        return json.dumps(fn(*args, **kwargs), ensure_ascii=False)

    call.__annotations__ = {**fn.__annotations__, "return": "str"}
    return call


class McpTools:
    """The MCP tools over a :class:`Backend`, with one shared session for the switches they train."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.session = Session()

    def register(self, demo: gr.Blocks) -> None:
        """Add the tools to ``demo`` (inside its ``with`` block) and keep the page's own endpoints off the tool list."""
        with demo:
            for name in TOOLS:
                gr.api(_as_json(user_errors(getattr(self, name))), api_name=name)
        for block_fn in demo.fns.values():
            if block_fn.api_name not in TOOLS and block_fn.fn is not None:
                try:
                    block_fn.fn._mcp_type = "page"  # Gradio lists as MCP tools only functions whose _mcp_type is "tool" or unset
                except AttributeError:  # a bound method: cannot be marked, so it stays listed
                    pass
        # Gradio warns at launch about every named endpoint with a gr.State input, listed as a tool or not: when every
        # such endpoint is off the list (the page's), its warning would only mislead whoever starts the app
        stateful = [f for f in demo.fns.values() if f.fn is not None and any(isinstance(i, gr.State) for i in f.inputs)]
        if all(getattr(f.fn, "_mcp_type", "tool") != "tool" for f in stateful):
            warnings.filterwarnings("ignore", message=STATE_WARNING, category=UserWarning)

    def _switch(self, name: str):
        lm, library = self.backend.get()
        return lm, self.session.get(name, library)

    def list_switches(self) -> dict:
        """The switches this server can steer with: their names, what +ε and −ε move toward, and the ε range in which text stays fluent.

        Returns:
            the model's name and one entry per switch (name, description, positive and negative direction, fluent ε range, recommended ε).
        """
        lm, library = self.backend.get()
        names = self.session.available(library)
        return {"model": lm.name, "switches": [_switch_summary(self.session.get(n, library)) for n in names]}

    def steer_text(self, prompt: str, switches: str = "", max_new_tokens: int = SAMPLING.max_new_tokens, seed: int = SEED,
                   adaptive: bool = False) -> dict:
        """Continue a prompt with switches at the given strengths, next to the unsteered continuation with the same seed.

        Args:
            prompt: the text the model continues (at most {prompt_tokens} tokens, about {prompt_words} words).
            switches: comma-separated NAME=EPS settings, e.g. "sentiment=4, formality=-2" (ε in ε0 units; see list_switches for names and fluent ranges); empty for none.
            max_new_tokens: how many tokens to generate, 1 to {new_tokens} ({default_tokens} by default).
            seed: the random seed ({seed} by default); the same seed gives the same text.
            adaptive: steer each generation only until a budget of {budget} nats of steering is spent, so strong settings stay fluent (false by default).

        Returns:
            the steered and unsteered texts, their scores (sentiment, toxicity, perplexity) and the settings used.
        """
        return generate_api(self.backend, prompt, switches, max_new_tokens, SAMPLING.temperature, SAMPLING.top_p, seed, False,
                            self.session, adaptive)

    def train_from_text(self, name: str, positive: str, negative: str = "", mode: str = "sentences", steps: int = TrainConfig().steps) -> dict:
        """Train a new switch from example text; it is kept on this server under its name for the other tools.

        Args:
            name: the new switch's name: 1–48 letters, digits, '_', '.', '+' or '-', starting with a letter or digit (a name already taken gets a suffix such as -2; the answer gives the final name).
            positive: text in the style +ε should move toward: one example per line in "sentences" mode, else a whole document.
            negative: text in the opposite style (one per line in "sentences" mode; the second document in "two documents" mode; unused in "one document" mode).
            mode: "sentences" (labelled lines on both sides), "one document" (what sets the document apart from the model's own text), or "two documents" (document A vs document B).
            steps: the most optimiser steps, up to {train_steps} (training stops earlier on a held-out criterion).

        Returns:
            the switch's name, its held-out gain, advice on whether its data sufficed (may_not_generalise: too little text or memorised), its fluent ε range and recommended ε, and the words it promotes and demotes.
        """
        if mode not in TRAIN_MODES:
            raise ValueError(f"mode must be one of {', '.join(TRAIN_MODES)}; got {mode!r}")
        lm, library = self.backend.get()
        check_name(name)
        if self.session.full():  # checked before spending the training time
            raise ValueError(f"this server already holds {MAX_SESSION_SWITCHES} switches trained over MCP; restart the app to clear "
                             "them, or train in the app and save to the library")
        for field, text in (("positive", positive), ("negative", negative))[: 1 if mode == "one document" else 2]:
            if not isinstance(text, str) or not text.strip():  # (the page's own message says to paste or upload)
                raise ValueError(f"{field} is empty: give its text ({'one example per line' if mode == 'sentences' else 'a document'})")
        pos, neg = training_data(TRAIN_MODES[mode], positive, None, negative, None)
        switch = self.backend.run(train_switch, lm, pos, neg, name=name, config=TrainConfig(steps=check_train_steps(steps)), background=True)
        switch.card = self.backend.calibrated(lm, switch)
        final = self.session.add(switch, library, name=name)
        words = self.backend.run(promoted_words, lm, switch, words=SHOWN_WORDS)
        advice = advise_on_data(switch.card)  # as the Train tab and the CLI say it
        return {**_switch_summary(switch), "name": final, "heldout_gain": switch.card.get("heldout_gain"), "advice": advice.text,
                "may_not_generalise": advice.weak, "promotes": [w.word for w in words.promoted],
                "demotes": [w.word for w in words.suppressed]}

    def highlight_text(self, text: str, switch: str, eps: float = DEFAULT_EPS, spans: int = DEFAULT_SPANS) -> dict:
        """Find the span(s) of a text that carry a switch's style most, e.g. the insult in a toxic comment (detox at negative ε).

        Args:
            text: the text to look at (up to {highlight_chars} characters).
            switch: the switch whose style to find (see list_switches).
            eps: the strength and side to look for: positive ε for the switch's positive style, negative for its negative style.
            spans: how many separate spans to return.

        Returns:
            the spans with their scores, and each word's contribution.
        """
        if len(text) > MAX_HIGHLIGHT_CHARS:
            raise ValueError(f"the text has {len(text):,} characters; highlighting takes at most {MAX_HIGHLIGHT_CHARS:,}")
        lm, s = self._switch(switch)
        try:
            return self.backend.run(highlight, lm, s, text, eps=eps, n_spans=spans, background=True).to_dict()
        except ValueError as err:
            if str(err).startswith("n_spans "):  # the library's name for the count is this tool's "spans"
                raise ValueError(str(err).replace("n_spans", "spans", 1)) from None
            raise

    def measure_style(self, text: str, switches: str = "") -> dict:
        """The style meter: which ε of each switch explains a text best (positive: the switch's positive style, negative: the other).

        Args:
            text: the text to measure (at most {meter_chars} characters: the meter tries many ε per switch).
            switches: comma-separated switch names (empty: the first {meter_switches}; the meter reads at most {meter_switches}).

        Returns:
            per switch, the best ε, the style it points to and the evidence in nats; "not_read" names the switches not read and why (past the meter's cap, or the same matrix as one read).
        """
        if len(text) > MAX_METER_CHARS:
            raise ValueError(f"the text has {len(text):,} characters; measure_style reads at most {MAX_METER_CHARS:,} (it "
                             "tries many ε per switch): pass an excerpt")
        lm, library = self.backend.get()
        pick = self.session.meter_switches(library, parse_names(switches))
        not_read = {**{n: f"the same switch as {kept}" for n, kept in pick.same.items()},
                    **{n: f"the meter reads at most {MAX_METER_SWITCHES} switches" for n in pick.left_out}}
        return {**self.backend.run(measure, lm, pick.read, text, background=True).to_dict(), **({"not_read": not_read} if not_read else {})}


# the tools' descriptions (their docstrings, which MCP clients read) give this server's limits and defaults as set here
_DOC_VALUES = dict(prompt_tokens=f"{MAX_PROMPT_TOKENS:,}", prompt_words=f"{round(MAX_PROMPT_TOKENS * 3 / 4, -2):,.0f}",
                   new_tokens=f"{MAX_NEW_TOKENS:,}", default_tokens=SAMPLING.max_new_tokens, seed=SEED,
                   budget=f"{SAMPLING.generation_budget:g}", train_steps=f"{MAX_TRAIN_STEPS:,}",
                   highlight_chars=f"{MAX_HIGHLIGHT_CHARS:,}", meter_chars=f"{MAX_METER_CHARS:,}", meter_switches=MAX_METER_SWITCHES)
for _name in TOOLS:
    _tool = getattr(McpTools, _name)
    if _tool.__doc__:  # (none under python -OO)
        _tool.__doc__ = _tool.__doc__.format(**_DOC_VALUES)
