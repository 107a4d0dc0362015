"""Typed options: defaults written once, validation that names the field and its range."""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest
import torch

import lmswitch as ls
from lmswitch.core.options import SAMPLING, SamplingOptions, TrainConfig
from lmswitch.harness.options import Protocol


def test_generation_functions_take_their_defaults_from_sampling_options():
    for fn in (ls.generate, ls.sweep):
        params = inspect.signature(fn).parameters
        for name in ("max_new_tokens", "temperature", "top_p", "chat"):
            assert params[name].default == getattr(SAMPLING, name), (fn.__name__, name)


def test_train_switch_defaults_are_the_train_config():
    assert inspect.signature(ls.train_switch).parameters["config"].default == TrainConfig()
    assert TrainConfig().warmup == TrainConfig().steps // 2 and TrainConfig(min_steps=3).warmup == 3
    assert TrainConfig().to_dict()["matmul_dtype"] == "auto"
    assert TrainConfig(matmul_dtype=torch.bfloat16).to_dict()["matmul_dtype"] == "bfloat16"


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (TrainConfig(steps=0), "steps"),
        (TrainConfig(steps=True), "steps"),
        (TrainConfig(lr=-1.0), "lr"),
        (TrainConfig(eps0=float("nan")), "eps0"),
        (TrainConfig(rank=0), "rank"),
        (TrainConfig(rank=10_000), "hidden size"),
        (TrainConfig(heldout=0.5), "heldout"),
        (TrainConfig(batch_tokens=8), "batch_tokens"),
        (TrainConfig(patience=0), "patience"),
        (TrainConfig(seed=-1), "seed"),
        (TrainConfig(steps=10, min_steps=11), "min_steps"),
    ],
)
def test_bad_train_configs_name_the_field(config, match):
    with pytest.raises(ValueError, match=match):
        config.validate(hidden_size=32)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (SamplingOptions(max_new_tokens=0), "max_new_tokens"),
        (SamplingOptions(max_new_tokens=10**6), "max_new_tokens"),
        (SamplingOptions(temperature=-0.1), "temperature"),
        (SamplingOptions(temperature=float("inf")), "temperature"),
        (SamplingOptions(top_p=1.01), "top_p"),
        (SamplingOptions(kl_budget=1.0), "give it with adaptive=True"),  # it would change nothing
        (SamplingOptions(chat=True), "chat template"),
    ],
)
def test_bad_sampling_options_name_the_field(llama_lm, options, match):
    with pytest.raises(ValueError, match=match):
        options.validate(llama_lm)


def test_numpy_numbers_in_options_become_python_numbers():
    """So a card or a result holding them is still JSON (a NumPy seed failed only at the end, when the switch was saved)."""
    import json

    import numpy as np

    config = TrainConfig(seed=np.int64(3), steps=np.int64(20), lr=np.float32(0.5))
    options = SamplingOptions(max_new_tokens=np.int64(5), top_p=np.float64(0.5))
    assert (type(config.seed), type(config.steps), type(config.lr), type(options.max_new_tokens)) == (int, int, float, int)
    json.dumps([config.to_dict(), options.to_dict()])


def test_a_protocol_from_sampling_options_keeps_every_decoding_setting():
    """The app's sweeps built their protocol field by field and left the adaptive budgets out."""
    protocols = [Protocol(samples=3, max_new_tokens=7, top_p=0.8, temperature=0.7, seed=5, adaptive=True, kl_budget=0.5,
                          generation_budget=2.0, best_of=2, repeat_guard=6),
                 Protocol(samples=3, seed=5, guide=3, repeat_guard=0)]  # (guided decoding does not take best of n)
    for protocol in protocols:
        assert Protocol.from_sampling(protocol.sampling(), samples=3, seed=5) == protocol
    # every decoding setting but chat (an evaluation continues plain prompts) is moved off its default above
    moved = {f.name for p in protocols for f in fields(SamplingOptions) if getattr(p.sampling(), f.name) != getattr(SamplingOptions(), f.name)}
    assert moved == {f.name for f in fields(SamplingOptions)} - {"chat"}, moved
    with pytest.raises(ValueError, match="plain prompts"):
        Protocol.from_sampling(SamplingOptions(chat=True), samples=1, seed=0)
