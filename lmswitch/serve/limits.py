"""What one request may ask of a shared server: the app's views, its ``/generate`` endpoint, the MCP tools and the
OpenAI-compatible API. Every request's prompt is read and its tokens decoded on the one compute thread, in turns with
every other user's, so one request may not hold it for minutes. The library itself has no such caps.

>>> check_request(lm, "My weekend was", SamplingOptions(max_new_tokens=2000))   # doctest: +SKIP
ValueError: max_new_tokens 2,000 is more than this server generates per request (1,024); …
"""

from __future__ import annotations

from lmswitch.core.checks import is_whole
from lmswitch.core.generate import Prompt, prompt_ids, prompt_room
from lmswitch.core.models import LanguageModel
from lmswitch.core.options import SamplingOptions

MAX_NEW_TOKENS = 1024  # new tokens per request
# prompt tokens per request: reading 2,048 takes ~2–3 s on 2 CPU cores, 8,000 about a minute (attention is quadratic)
MAX_PROMPT_TOKENS = 2048
MAX_TRAIN_STEPS = 5_000  # optimiser steps per training (it stops earlier on its held-out criterion; the CLI takes more)
# the style meter's reading: it scores every ε it tries, jointly for its switches, so its time grows with the text and
# faster than with the switches (SmolLM2 on 2 cores, 2026-11-30: 3 switches on 620 tokens 4.7 s, on 1,221 tokens 14 s;
# 8 switches on 620 tokens 45 s, on 1,221 tokens 96 s; a highlight of a long text with eight switches held every other
# user's Inspect, highlight and sweep for five minutes)
MAX_METER_CHARS = 2_000  # ~600 tokens
MAX_METER_SWITCHES = 3
# text a highlight reads: one body pass and one head pass over it (~10 s for 20,000 characters, ~5,900 tokens)
MAX_HIGHLIGHT_CHARS = 20_000
MAX_TRAIN_CHARS = 400_000  # training text (~100k tokens) per request: minutes on a CPU; bigger corpora belong to `python -m lmswitch train`
MAX_ROWS = 96  # generations in one sweep or composition-map call


def prompt_limit(lm: LanguageModel, options: SamplingOptions) -> int:
    """The most prompt tokens a request may bring: this server's cap, or less where the context leaves less room."""
    return min(MAX_PROMPT_TOKENS, prompt_room(lm, options))


def check_new_tokens(options: SamplingOptions) -> None:
    """Refuse (``ValueError``) new tokens outside this server's 1 … :data:`MAX_NEW_TOKENS`, before the library's own
    check (whose limit is the model's context, not this server's)."""
    k = options.max_new_tokens
    if is_whole(k) and k < 1:
        raise ValueError(f"max_new_tokens must be an integer from 1 to {MAX_NEW_TOKENS:,} on this server; got {k}")
    if is_whole(k) and k > MAX_NEW_TOKENS:
        raise ValueError(f"max_new_tokens {k:,} is more than this server generates per request ({MAX_NEW_TOKENS:,}); ask for "
                         "fewer, or continue the text in a second request")


def check_request(lm: LanguageModel, prompt: Prompt, options: SamplingOptions) -> int:
    """Refuse (``ValueError``) a request over this server's caps or the model's context, naming what to change;
    returns the prompt's token count."""
    check_new_tokens(options)
    n, limit = len(prompt_ids(lm, prompt, options.chat)), prompt_limit(lm, options)
    if n > limit:
        raise ValueError(f"the prompt has {n:,} tokens; {_why(lm, options, limit)}: shorten it")
    return n


def _why(lm: LanguageModel, options: SamplingOptions, limit: int) -> str:
    if limit < MAX_PROMPT_TOKENS:
        return (f"this model's context ({lm.context_length:,}) leaves room for {limit:,} beside {options.max_new_tokens:,} "
                "new tokens (or ask for fewer)")
    return f"this server reads at most {MAX_PROMPT_TOKENS:,} per request (every other user waits while a prompt is read)"


def check_train_steps(steps: int) -> int:
    """``steps``, refused (``ValueError``) under 1 or over this server's cap."""
    if not is_whole(steps) or steps < 1:
        raise ValueError(f"steps must be an integer from 1 to {MAX_TRAIN_STEPS:,} on this server; got {steps!r}")
    if steps > MAX_TRAIN_STEPS:
        raise ValueError(f"steps {steps:,} is more than this server trains per request ({MAX_TRAIN_STEPS:,}); training stops "
                         "earlier on its held-out criterion anyway (python -m lmswitch train takes more)")
    return steps
