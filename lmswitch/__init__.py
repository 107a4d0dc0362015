"""lmswitch: steer language models with LM-Switch / LM-Steer switches.

>>> import lmswitch as ls                                          # doctest: +SKIP
>>> lm = ls.load_model()                                           # embedded SmolLM2-135M-Instruct
>>> s = ls.train_switch(lm, happy_sentences, sad_sentences, name="sentiment")
>>> ls.generate(lm, "The food was", [(s, 5)], seed=0)
"""

from .generate import generate, stream_generate, stream_rows, sweep
from .models import DEFAULT_MODEL, LanguageModel, cache_dir, load_model, model_fingerprint
from .steering import steer, steer_rows, steering_matrix
from .switch import Switch, SwitchFileError, load_switch
from .train import TrainingCancelled, train_switch

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MODEL",
    "LanguageModel",
    "Switch",
    "SwitchFileError",
    "TrainingCancelled",
    "cache_dir",
    "generate",
    "load_model",
    "load_switch",
    "model_fingerprint",
    "steer",
    "steer_rows",
    "steering_matrix",
    "stream_generate",
    "stream_rows",
    "sweep",
    "train_switch",
]
