"""lmswitch: steer language models with LM-Switch / LM-Steer switches.

>>> import lmswitch as ls                                          # doctest: +SKIP
>>> lm = ls.load_model()                                           # embedded SmolLM2-135M-Instruct
>>> s = ls.train_switch(lm, happy_sentences, sad_sentences, name="sentiment")
>>> ls.generate(lm, "The food was", [(s, 5)], seed=0)
>>> ls.highlight(lm, s, "The soup was cold and the waiter rude.", eps=-1).spans
>>> ls.svd_dimensions(lm, s).dimensions[0].promoted
>>> ls.measure(lm, [s], "What a lovely evening!").switches[0].best_eps
"""

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# name → the module that defines it; imported on first use (PEP 562), so ``python -m lmswitch --help`` and other
# light uses do not pay for torch and transformers (~4 s) before they need them
_EXPORTS = {
    "best_spans": "lmswitch.lenses.spans",
    "cache_dir": "lmswitch.core.models",
    "calibrated_card": "lmswitch.harness.frontier",
    "Card": "lmswitch.core.card",
    "DEFAULT_MODEL": "lmswitch.core.models",
    "generate": "lmswitch.core.generate",
    "highlight": "lmswitch.lenses.spans",
    "LanguageModel": "lmswitch.core.models",
    "Learned": "lmswitch.lenses.learned",
    "load_model": "lmswitch.core.models",
    "load_switch": "lmswitch.core.switch",
    "measure": "lmswitch.lenses.meter",
    "model_fingerprint": "lmswitch.core.models",
    "preferred_dtype": "lmswitch.core.models",
    "promoted_words": "lmswitch.lenses.svd",
    "SamplingOptions": "lmswitch.core.options",
    "steer": "lmswitch.core.steering",
    "steer_rows": "lmswitch.core.steering",
    "steering_matrix": "lmswitch.core.steering",
    "stream_generate": "lmswitch.core.generate",
    "stream_rows": "lmswitch.core.generate",
    "svd_dimensions": "lmswitch.lenses.svd",
    "sweep": "lmswitch.core.generate",
    "Switch": "lmswitch.core.switch",
    "SwitchFileError": "lmswitch.core.switch",
    "token_changes": "lmswitch.lenses.spans",
    "train_events": "lmswitch.core.train",
    "train_switch": "lmswitch.core.train",
    "TrainConfig": "lmswitch.core.options",
    "TrainingCancelled": "lmswitch.core.train",
    "TrainingRecord": "lmswitch.core.card",
    "TransferRecord": "lmswitch.core.card",
    "transfer": "lmswitch.core.transfer",
    "weak_line": "lmswitch.lenses.spans",
    "what_was_learned": "lmswitch.lenses.learned",
}

if TYPE_CHECKING:  # what static analysers and IDEs see
    from lmswitch.core.card import Card, TrainingRecord, TransferRecord  # noqa: F401
    from lmswitch.core.generate import generate, stream_generate, stream_rows, sweep  # noqa: F401
    from lmswitch.core.models import DEFAULT_MODEL, LanguageModel, cache_dir, load_model, model_fingerprint, preferred_dtype  # noqa: F401
    from lmswitch.core.options import SamplingOptions, TrainConfig  # noqa: F401
    from lmswitch.core.steering import steer, steer_rows, steering_matrix  # noqa: F401
    from lmswitch.core.switch import Switch, SwitchFileError, load_switch  # noqa: F401
    from lmswitch.core.train import TrainingCancelled, train_events, train_switch  # noqa: F401
    from lmswitch.core.transfer import transfer  # noqa: F401
    from lmswitch.harness.frontier import calibrated_card  # noqa: F401
    from lmswitch.lenses.learned import Learned, what_was_learned  # noqa: F401
    from lmswitch.lenses.meter import measure  # noqa: F401
    from lmswitch.lenses.spans import best_spans, highlight, token_changes, weak_line  # noqa: F401
    from lmswitch.lenses.svd import promoted_words, svd_dimensions  # noqa: F401


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'lmswitch' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "Card",
    "DEFAULT_MODEL",
    "LanguageModel",
    "Learned",
    "SamplingOptions",
    "Switch",
    "SwitchFileError",
    "TrainConfig",
    "TrainingCancelled",
    "TrainingRecord",
    "TransferRecord",
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
    "weak_line",
    "what_was_learned",
]
