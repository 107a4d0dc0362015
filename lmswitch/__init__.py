"""lmswitch: steer language models with LM-Switch / LM-Steer switches.

>>> import lmswitch as ls                                          # doctest: +SKIP
>>> lm = ls.load_model()                                           # embedded SmolLM2-135M-Instruct
>>> s = ls.train_switch(lm, happy_sentences, sad_sentences, name="sentiment")
>>> ls.generate(lm, "The food was", [(s, 5)], seed=0)
>>> ls.highlight(lm, s, "The soup was cold and the waiter rude.", eps=-5)["spans"]
>>> ls.svd_dimensions(lm, s)["dimensions"][0]["promoted"]
>>> ls.measure(lm, [s], "What a lovely evening!")["switches"][0]["best_eps"]
"""

from .generate import generate, stream_generate, stream_rows, sweep
from .interpret import promoted_words, svd_dimensions
from .meter import measure
from .models import DEFAULT_MODEL, LanguageModel, cache_dir, load_model, model_fingerprint, preferred_dtype
from .spans import best_spans, highlight, token_changes
from .steering import steer, steer_rows, steering_matrix
from .switch import Switch, SwitchFileError, load_switch
from .train import TrainingCancelled, train_switch
from .transfer import transfer

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MODEL",
    "LanguageModel",
    "Switch",
    "SwitchFileError",
    "TrainingCancelled",
    "best_spans",
    "cache_dir",
    "generate",
    "highlight",
    "load_model",
    "load_switch",
    "measure",
    "model_fingerprint",
    "preferred_dtype",
    "promoted_words",
    "steer",
    "steer_rows",
    "steering_matrix",
    "stream_generate",
    "stream_rows",
    "svd_dimensions",
    "sweep",
    "token_changes",
    "train_switch",
    "transfer",
]
