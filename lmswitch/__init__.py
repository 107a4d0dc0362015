"""lmswitch: steer language models with LM-Switch / LM-Steer switches.

>>> import lmswitch as ls                                          # doctest: +SKIP
>>> lm = ls.load_model()                                           # embedded SmolLM2-135M-Instruct
>>> s = ls.train_switch(lm, happy_sentences, sad_sentences, name="sentiment")
>>> ls.generate(lm, "The food was", [(s, 5)], seed=0)
>>> ls.highlight(lm, s, "The soup was cold and the waiter rude.", eps=-5).spans
>>> ls.svd_dimensions(lm, s).dimensions[0].promoted
>>> ls.measure(lm, [s], "What a lovely evening!").switches[0].best_eps
"""

__version__ = "0.1.0"

from lmswitch.core.card import Card, TrainingRecord  # noqa: E402
from lmswitch.core.generate import generate, stream_generate, stream_rows, sweep  # noqa: E402
from lmswitch.core.models import DEFAULT_MODEL, LanguageModel, cache_dir, load_model, model_fingerprint, preferred_dtype  # noqa: E402
from lmswitch.core.options import SamplingOptions, TrainConfig  # noqa: E402
from lmswitch.core.steering import steer, steer_rows, steering_matrix  # noqa: E402
from lmswitch.core.switch import Switch, SwitchFileError, load_switch  # noqa: E402
from lmswitch.core.train import TrainingCancelled, train_events, train_switch  # noqa: E402
from lmswitch.core.transfer import transfer  # noqa: E402
from lmswitch.harness.frontier import calibrated_card  # noqa: E402
from lmswitch.lenses.learned import Learned, what_was_learned  # noqa: E402
from lmswitch.lenses.meter import measure  # noqa: E402
from lmswitch.lenses.spans import best_spans, highlight, token_changes  # noqa: E402
from lmswitch.lenses.svd import promoted_words, svd_dimensions  # noqa: E402

__all__ = [
    "DEFAULT_MODEL",
    "Card",
    "LanguageModel",
    "Learned",
    "SamplingOptions",
    "Switch",
    "SwitchFileError",
    "TrainConfig",
    "TrainingCancelled",
    "TrainingRecord",
    "best_spans",
    "cache_dir",
    "calibrated_card",
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
    "train_events",
    "train_switch",
    "transfer",
    "what_was_learned",
]
