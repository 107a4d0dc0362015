"""Big models and more than one process: steering with offloaded weights (accelerate device maps), and training
data-parallel under ``accelerate launch`` giving the switch one process gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import EXAMPLES, lines, random_ids, random_switch, side_by_side

import lmswitch as ls
from lmswitch.core.parallel import gather, mine
from lmswitch.core.transfer import transfer
from lmswitch.io.resources import shipped_switch_path

ROOT = Path(__file__).resolve().parents[1]


def test_one_process_takes_every_piece_and_gathers_them_in_order():
    items = ["a", "b", "c"]
    assert mine(items) == [(0, "a"), (1, "b"), (2, "c")]
    assert gather([(2, "C"), (0, "A"), (1, "B")], 3) == ["A", "B", "C"]
    with pytest.raises(RuntimeError, match="gathered 2 of 3"):
        gather([(0, "A"), (2, "C")], 3)


def logits(lm, ids, setting) -> torch.Tensor:
    with torch.no_grad(), ls.steer(lm, setting):
        return lm.model(ids).logits.float()


def test_steering_with_the_head_offloaded_to_disk_is_identical(llama_lm, tmp_path):
    folder = tmp_path / "model"
    llama_lm.model.save_pretrained(folder)
    llama_lm.tokenizer.save_pretrained(folder)
    off = ls.load_model(str(folder), dtype="float32", device_map={"model": "cpu", "lm_head": "disk"}, offload_folder=tmp_path / "off")
    assert off.model.lm_head.weight.device.type == "meta" and off.head_device.type == "cpu"  # the head's weight is on disk
    assert off.fingerprint == llama_lm.fingerprint and torch.equal(off.head_weight(), llama_lm.head_weight())
    s = random_switch(llama_lm, seed=1, scale=20.0)
    ids = random_ids(llama_lm, 2, 8, seed=3)
    assert torch.equal(logits(off, ids, [(s, 5.0)]), logits(llama_lm, ids, [(s, 5.0)]))
    text = "alpha beta gamma delta alpha beta"
    assert ls.highlight(off, s, text, eps=5.0).to_dict() == ls.highlight(llama_lm, s, text, eps=5.0).to_dict()  # the head's maths too
    there = transfer(s, llama_lm, off, min_anchors=20)  # the map reads both heads' weights, one from the offload
    assert torch.equal(there.W, transfer(s, llama_lm, llama_lm, min_anchors=20).W)


@pytest.mark.real_model
def test_the_embedded_model_with_its_body_on_disk_steers_identically(lm, tmp_path):
    on_disk = {"model.embed_tokens": "cpu", "model.layers": "disk", "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
    off = ls.load_model(dtype=lm.model.dtype, device_map=on_disk, offload_folder=tmp_path)
    assert off.model.model.layers[0].mlp.up_proj.weight.device.type == "meta"
    # against the model in memory with the same products: accelerate's layers stay plain, and the packed ones (the
    # ``lm`` fixture's) sum in another order on some CPUs (float32 on an AVX2 EPYC: logits 1e-4 apart)
    plain = ls.load_model(dtype=lm.model.dtype, pack=False)
    sentiment = ls.load_switch(shipped_switch_path("sentiment"), off)
    ids = lm.tokenizer("My weekend was great", return_tensors="pt").input_ids
    assert torch.equal(logits(off, ids, [(sentiment, 6.0)]), logits(plain, ids, [(sentiment, 6.0)]))
    assert ls.generate(off, "My weekend was", [(sentiment, 6.0)], seed=1, max_new_tokens=10) == \
        ls.generate(plain, "My weekend was", [(sentiment, 6.0)], seed=1, max_new_tokens=10)


ACCELERATE = ["-m", "accelerate.commands.launch", "--cpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
              "--dynamo_backend", "no"]


def one_and_two_processes(command: list[str], out_one: Path, out_two: Path) -> tuple[subprocess.CompletedProcess, ...]:
    """``python COMMAND OUT_ONE`` in one process and under ``accelerate launch`` with two, one thread each; both must succeed.
    The two runs go side by side (each process's results depend on its own thread count only), so their single-threaded
    start-ups (imports, the model's load) overlap."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return tuple(side_by_side([[sys.executable, *launcher, *command, str(out)] for launcher, out in (([], out_one), (ACCELERATE, out_two))],
                              env=env, cwd=ROOT))


@pytest.mark.real_model
@pytest.mark.slow
def test_accelerate_launch_trains_the_switch_one_process_trains(tmp_path):
    """Two CPU processes split the hidden-state caching and end with the same switch (one thread each, as in one process
    with one thread: the thread count changes float rounding, and the solver follows it)."""
    (tmp_path / "pos.txt").write_text("\n".join(lines(EXAMPLES / "sentiment_positive.txt")[:30]), encoding="utf-8")
    (tmp_path / "neg.txt").write_text("\n".join(lines(EXAMPLES / "sentiment_negative.txt")[:30]), encoding="utf-8")
    train = ["-m", "lmswitch", "--dtype", "float32", "--json", "train", "--positive", str(tmp_path / "pos.txt"), "--negative",
             str(tmp_path / "neg.txt"), "--no-calibrate", "--steps", "40", "--out"]
    _, two = one_and_two_processes(train, tmp_path / "one.safetensors", tmp_path / "two.safetensors")
    assert json.loads(two.stdout)["out"] == str(tmp_path / "two.safetensors")  # printed once: by the main process only
    a, b = ls.load_switch(tmp_path / "one.safetensors"), ls.load_switch(tmp_path / "two.safetensors")
    assert torch.equal(a.W, b.W) and a.card["tokens_train"] == b.card["tokens_train"]


@pytest.mark.real_model
@pytest.mark.slow
def test_accelerate_launch_evaluates_a_sweep_like_one_process(tmp_path):
    """Two processes sample their shares of the batches and gather them: the same texts and scores as one process."""
    sweep = ["-m", "lmswitch", "--dtype", "float32", "--json", "eval", "--switch", "sentiment", "--eps=-6,0,6", "--limit", "4",
             "--samples", "2", "--max-new-tokens", "12", "--out"]
    one_and_two_processes(sweep, tmp_path / "one", tmp_path / "two")
    a, b = (json.loads((tmp_path / name / "results.json").read_text()) for name in ("one", "two"))
    timeless = [[{k: v for k, v in row.items() if k != "seconds"} for row in r["sweep"]] for r in (a, b)]
    assert a["texts"] == b["texts"] and timeless[0] == timeless[1]
    assert len(a["texts"]) == 3 and len(a["texts"][0]) == 4 * 2  # three ε, four prompts × two samples each
