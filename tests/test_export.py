"""Export: the PEFT adapter, loaded by the real ``peft`` on a fresh copy of the model, and the merged model, loaded by
transformers' own ``from_pretrained``, give lmswitch's steered logits."""

from __future__ import annotations

import copy
import json
import os
import stat

import pytest
import torch
from conftest import FAMILIES, random_ids, random_switch
from peft import PeftModel
from peft.helpers import rescale_adapter_scale
from safetensors import safe_open
from transformers import AutoModelForCausalLM

import lmswitch as ls
from lmswitch.cli import main
from lmswitch.core.export import ADAPTER_FILE, export, export_merged, export_peft, lora_factors
from lmswitch.io.resources import shipped_switch_path


def steered_logits(lm, ids, setting) -> torch.Tensor:
    with torch.no_grad(), ls.steer(lm, setting):
        return lm.model(ids).logits.float()


def adapter_model(lm, folder) -> PeftModel:
    """The real PEFT loader on an untouched copy of the base model."""
    return PeftModel.from_pretrained(copy.deepcopy(lm.model), str(folder)).eval()


@pytest.mark.parametrize("family", FAMILIES)
def test_exported_adapter_equals_the_steered_model_and_scales_like_eps(make_lm, family, tmp_path):
    lm = make_lm(family, init=0.2)
    s = random_switch(lm, seed=1, scale=20.0, name="mood")
    report = export_peft(lm, [(s, 6.0)], tmp_path / "mood")
    assert report.rank == report.full_rank == lm.hidden_size and report.kept_energy == pytest.approx(1.0)
    assert report.relative_logit_error < 1e-4
    ids = random_ids(lm, 2, 10, seed=3)
    peft_model = adapter_model(lm, tmp_path / "mood")
    with torch.no_grad():
        got = peft_model(ids).logits.float()
        with rescale_adapter_scale(peft_model, 0.5):
            half = peft_model(ids).logits.float()
    assert torch.allclose(got, steered_logits(lm, ids, [(s, 6.0)]), atol=1e-4, rtol=1e-4)
    assert torch.allclose(half, steered_logits(lm, ids, [(s, 3.0)]), atol=1e-4, rtol=1e-4)  # adapter scale × ½ = ε / 2
    assert not torch.allclose(got, lm.model(ids).logits.float(), atol=1e-2)  # it does steer
    with safe_open(str(tmp_path / "mood" / ADAPTER_FILE), "pt") as f:  # only the head gets a LoRA (never the tied input embedding)
        assert sorted(f.keys()) == [f"base_model.model.{report.target_module}.lora_{x}.weight" for x in "AB"]


@pytest.mark.parametrize("family", FAMILIES)
def test_merged_model_loads_with_plain_transformers_and_steers_like_the_switch(make_lm, family, tmp_path):
    lm = make_lm(family, init=0.2)
    a, b = random_switch(lm, seed=1, scale=20.0, name="a"), random_switch(lm, seed=2, scale=20.0, name="b")
    report = export_merged(lm, [(a, 6.0), (b, -2.0)], tmp_path / "merged")
    assert report.format == "merged" and not report.is_lora and report.relative_logit_error < 1e-5
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    ids = random_ids(lm, 2, 10, seed=3)
    with torch.no_grad():
        got = merged(ids).logits.float()
    assert torch.allclose(got, steered_logits(lm, ids, [(a, 6.0), (b, -2.0)]), atol=1e-4, rtol=1e-4)
    assert torch.equal(merged.get_input_embeddings().weight, lm.model.get_input_embeddings().weight)  # the head alone changed
    assert not torch.allclose(got, lm.model(ids).logits.float(), atol=1e-2)
    assert json.loads((tmp_path / "merged" / "lmswitch_setting.json").read_text())["setting"] == [["a", 6.0], ["b", -2.0]]


def test_two_adapters_together_compose_like_switches(llama_lm, tmp_path):
    a, b = random_switch(llama_lm, seed=1, scale=20.0, name="a"), random_switch(llama_lm, seed=2, scale=20.0, name="b")
    export_peft(llama_lm, [(a, 4.0)], tmp_path / "a")
    export_peft(llama_lm, [(b, -3.0)], tmp_path / "b")
    peft_model = adapter_model(llama_lm, tmp_path / "a")
    peft_model.load_adapter(str(tmp_path / "b"), adapter_name="b")
    peft_model.base_model.set_adapter(["default", "b"])
    ids = random_ids(llama_lm, 2, 8, seed=5)
    with torch.no_grad():
        both = peft_model(ids).logits.float()
    assert torch.allclose(both, steered_logits(llama_lm, ids, [(a, 4.0), (b, -3.0)]), atol=1e-4, rtol=1e-4)


def test_rank_truncation_reports_what_it_keeps(llama_lm, tmp_path):
    s = random_switch(llama_lm, seed=4, scale=20.0)
    lora = lora_factors(llama_lm, [(s, 5.0)], rank=4)
    assert lora.A.shape == (4, llama_lm.hidden_size) and lora.B.shape == (llama_lm.vocab_size, 4) and lora.rank == 4
    assert lora.full_rank == llama_lm.hidden_size
    singular = torch.linalg.svdvals(s.W.double())
    assert lora.kept_energy == pytest.approx(float((singular[:4] ** 2).sum() / (singular**2).sum()), rel=1e-6)
    report = export_peft(llama_lm, [(s, 5.0)], tmp_path / "r4", rank=4)
    assert report.rank == 4 and 0.05 < report.relative_logit_error < 1  # a random switch loses a lot at rank 4, and says so
    assert report.is_lora and report.kept_energy == round(lora.kept_energy, 6)
    assert report.promoted_words_kept < 1
    low = random_switch(llama_lm, seed=4, scale=20.0)
    u, sv, vh = torch.linalg.svd(low.W)
    low.W = (u[:, :3] * sv[:3]) @ vh[:3]  # a planted rank-3 switch is exported exactly at rank 3
    exact = export_peft(llama_lm, [(low, 5.0)], tmp_path / "r3", rank=8)
    assert exact.full_rank == 3 and exact.rank == 3 and exact.relative_logit_error < 1e-4 and exact.promoted_words_kept == 1.0


def test_bad_exports_are_refused_and_nothing_is_written(llama_lm, tmp_path):
    s = random_switch(llama_lm, seed=1)
    with pytest.raises(ValueError, match="every ε is 0: there is nothing to export"):
        export_peft(llama_lm, [(s, 0.0)], tmp_path / "zero")
    with pytest.raises(ValueError, match="no switch was given: there is nothing to export"):
        export_peft(llama_lm, [], tmp_path / "none")
    with pytest.raises(ValueError, match="cancel"):
        export_peft(llama_lm, [(s, 3.0), (-s, 3.0)], tmp_path / "cancel")
    with pytest.raises(ValueError, match="is given twice"):
        export(llama_lm, [(s, 3.0), (s, -3.0)], tmp_path / "twice")
    with pytest.raises(ValueError, match="got Switch '.*' alone: give it with its ε"):
        export(llama_lm, s, tmp_path / "alone")
    with pytest.raises(TypeError, match="expected a LanguageModel; got str"):
        export("smollm2-135m", [(s, 3.0)], tmp_path / "named")
    with pytest.raises(ValueError, match="rank must be a positive integer"):
        export_peft(llama_lm, [(s, 2.0)], tmp_path / "bad", rank=0)
    with pytest.raises(ValueError, match=r"rank \(--rank\) applies to LoRA"):
        export(llama_lm, [(s, 2.0)], tmp_path / "m", format="merged", rank=4)
    with pytest.raises(ValueError, match="unknown export format"):
        export(llama_lm, [(s, 2.0)], tmp_path / "g", format="onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # not even a temporary folder is left


def test_an_export_never_lands_in_a_folder_of_other_files(llama_lm, tmp_path, monkeypatch):
    """A model folder with an adapter beside it would load steered without anyone asking: refused unless forced, and
    before the export's work (on the embedded model's head, seconds)."""
    s = random_switch(llama_lm, seed=1, scale=20.0)
    model_dir = tmp_path / "model"
    llama_lm.model.save_pretrained(model_dir)
    before = sorted(p.name for p in model_dir.iterdir())
    with monkeypatch.context() as m:
        for work in ("lora_factors", "merged_head", "full_rank"):
            m.setattr(f"lmswitch.core.export.{work}", lambda *args, _work=work, **kwargs: pytest.fail(f"{_work} ran before the refusal"))
        for fmt in ("peft", "merged"):
            with pytest.raises(ValueError, match="already holds other files.*--force"):
                export(llama_lm, [(s, 2.0)], model_dir, format=fmt)
    assert sorted(p.name for p in model_dir.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    export_peft(llama_lm, [(s, 2.0)], model_dir, force=True)  # asked for: written beside the model's files
    assert set(before) < {p.name for p in model_dir.iterdir()}
    with pytest.raises(ValueError, match="is a file"):
        export_peft(llama_lm, [(s, 2.0)], model_dir / "config.json")


def test_an_earlier_export_is_replaced_whole(llama_lm, tmp_path):
    s = random_switch(llama_lm, seed=1, scale=20.0)
    first = export_peft(llama_lm, [(s, 2.0)], tmp_path / "out", rank=2)
    second = export_peft(llama_lm, [(s, 4.0)], tmp_path / "out", rank=100)
    assert first.rank == 2 and second.rank == second.full_rank == llama_lm.hidden_size
    assert second.notes and "above the steering's full rank" in second.notes[0]
    config = json.loads((tmp_path / "out" / "adapter_config.json").read_text())
    assert config["r"] == llama_lm.hidden_size and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    export_merged(llama_lm, [(s, 2.0)], tmp_path / "merged")
    export_merged(llama_lm, [(s, 3.0)], tmp_path / "merged")
    assert json.loads((tmp_path / "merged" / "lmswitch_setting.json").read_text())["setting"] == [[s.name, 3.0]]


def test_files_a_user_added_to_an_earlier_export_are_never_swept_away(llama_lm, tmp_path, monkeypatch):
    """An earlier export is replaced whole only when it holds nothing else (a merged one was replaced with a user's
    notes in it), never from under the user's own shell (``--out .``), and ``--out ""`` is no folder."""
    s = random_switch(llama_lm, seed=1, scale=20.0)
    export_merged(llama_lm, [(s, 2.0)], tmp_path / "merged")
    (tmp_path / "merged" / "NOTES.md").write_text("my notes")
    with pytest.raises(ValueError, match="already holds other files.*NOTES.md"):
        export_merged(llama_lm, [(s, 3.0)], tmp_path / "merged")
    assert (tmp_path / "merged" / "NOTES.md").read_text() == "my notes"
    export_peft(llama_lm, [(s, 2.0)], tmp_path / "here")
    monkeypatch.chdir(tmp_path / "here")
    for out in (".", tmp_path / "here"):
        with pytest.raises(ValueError, match="is the folder you are in"):
            export_peft(llama_lm, [(s, 3.0)], out)
    with pytest.raises(ValueError, match=r"folder \(out, --out\) is empty"):
        export(llama_lm, [(s, 3.0)], "")
    export_peft(llama_lm, [(s, 3.0)], ".", force=True)  # file by file: the folder stays the one the shell is in
    assert os.path.samefile(".", tmp_path / "here") and sorted(p.name for p in tmp_path.iterdir()) == ["here", "merged"]


def test_an_export_is_readable_to_other_users_as_any_new_folder(llama_lm, tmp_path):
    """A server running as another user (vLLM, a container) must read it: the umask's modes, not a temporary folder's
    0700 or the 0600 safetensors gives its files."""
    s = random_switch(llama_lm, seed=1, scale=20.0)
    old = os.umask(0o022)
    try:
        export_peft(llama_lm, [(s, 2.0)], tmp_path / "adapter")
        export_merged(llama_lm, [(s, 2.0)], tmp_path / "merged")
    finally:
        os.umask(old)
    for folder in (tmp_path / "adapter", tmp_path / "merged"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}
        assert any(name.endswith(".safetensors") for name in modes) and set(modes.values()) == {0o644}, modes


def test_cli_export_writes_an_adapter_and_prints_its_fidelity(llama_lm, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "model"
    llama_lm.model.save_pretrained(folder)
    llama_lm.tokenizer.save_pretrained(folder)
    monkeypatch.setenv("LMSWITCH_CACHE", str(tmp_path / "cache"))
    lm = ls.load_model(str(folder), dtype="float32")
    switch = random_switch(lm, seed=1, scale=20.0, name="mood")
    path = switch.save(tmp_path / "mood.safetensors")
    code = main(["--model", str(folder), "--dtype", "float32", "export", "--switch", f"{path}=5", "--format", "peft",
                 "--out", str(tmp_path / "out"), "--rank", "8"])
    out = capsys.readouterr()
    assert code == 0 and (tmp_path / "out" / "adapter_config.json").is_file(), out.err
    assert "rank 8 of 32" in out.out and "relative error of the logit change" in out.out and "most promoted words kept" in out.out
    assert json.loads((tmp_path / "out" / "adapter_config.json").read_text())["base_model_name_or_path"] == str(folder)
    code = main(["--model", str(folder), "export", "--switch", str(path), "--out", str(tmp_path / "noeps")])
    assert code != 0 and "no recommended ε" in capsys.readouterr().err and not (tmp_path / "noeps").exists()
    switch.card = switch.card.calibrated(-2.0, 3.0)
    switch.save(path)
    code = main(["--model", str(folder), "--dtype", "float32", "--json", "export", "--switch", str(path), "--format", "merged",
                 "--out", str(tmp_path / "merged")])
    out = capsys.readouterr()
    assert code == 0 and json.loads(out.out)["setting"] == [["mood", 3.0]], out.err  # the card's recommended ε
    code = main(["--model", str(folder), "export", "--switch", f"{path}=9", "--out", str(tmp_path / "far")])
    out = capsys.readouterr().out  # the library's report says it (its notes), and the command prints them
    assert code == 0 and "note: 'mood': ε +9 is beyond its fluent range -2 … +3" in out and "plain steering" in out, out
    assert "--adaptive stops" not in out
    code = main(["--model", str(folder), "export", "--switch", f"{path}=2000", "--out", str(tmp_path / "refused")])
    out = capsys.readouterr()  # refused before anything is written, and so before any note
    assert code != 0 and "out of range" in out.err and "beyond its fluent range" not in out.out + out.err
    assert not (tmp_path / "refused").exists()
    with pytest.raises(SystemExit) as stop:  # checked before any model is loaded
        main(["--model", "no-such-model", "export", "--switch", f"{path}=5", "--format", "onnx", "--out", str(tmp_path / "g")])
    assert stop.value.code == 2 and "invalid choice" in capsys.readouterr().err


@pytest.mark.real_model
def test_shipped_switch_as_an_adapter_on_the_embedded_model(lm32, tmp_path):
    """The shipped sentiment switch at its recommended ε, exported and loaded by peft on SmolLM2: same logits, same greedy text."""
    lm = lm32
    sentiment = ls.load_switch(shipped_switch_path("sentiment"), lm)
    eps = sentiment.card.recommended_eps
    report = export_peft(lm, [(sentiment, eps)], tmp_path / "sentiment")
    assert report.target_module == "lm_head" and report.relative_logit_error < 1e-4
    assert json.loads((tmp_path / "sentiment" / "adapter_config.json").read_text())["base_model_name_or_path"] == lm.pretrained_id
    peft_model = adapter_model(lm, tmp_path / "sentiment")
    ids = lm.tokenizer("My weekend was", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.allclose(peft_model(ids).logits.float(), steered_logits(lm, ids, [(sentiment, eps)]), atol=1e-3, rtol=1e-4)
        greedy = peft_model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=lm.tokenizer.pad_token_id)
    text = lm.tokenizer.decode(greedy[0, ids.shape[1]:], skip_special_tokens=True)
    assert text == ls.generate(lm, "My weekend was", [(sentiment, eps)], max_new_tokens=12, temperature=0, repeat_guard=0)[0]


@pytest.mark.real_model
def test_two_shipped_switches_merged_into_the_embedded_model(lm32, tmp_path):
    """sentiment and formality at their recommended ε baked into SmolLM2's head: a plain transformers load writes the same text."""
    lm = lm32
    setting = [(ls.load_switch(shipped_switch_path(n), lm), None) for n in ("sentiment", "formality")]
    setting = [(s, s.card.recommended_eps) for s, _ in setting]
    export_merged(lm, setting, tmp_path / "merged")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", dtype=torch.float32).eval()
    ids = lm.tokenizer("My weekend was", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits.float(), steered_logits(lm, ids, setting), atol=1e-3, rtol=1e-4)
        greedy = merged.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=lm.tokenizer.pad_token_id)
    text = lm.tokenizer.decode(greedy[0, ids.shape[1]:], skip_special_tokens=True)
    assert text == ls.generate(lm, "My weekend was", setting, max_new_tokens=12, temperature=0, repeat_guard=0)[0]


def test_a_foreign_adapter_or_the_model_itself_is_never_replaced(llama_lm, tmp_path):
    """Only folders lmswitch wrote (marked in their metadata) are replaced; a user's own adapter with the same file names is not."""
    s = random_switch(llama_lm, seed=1, scale=20.0)
    theirs = tmp_path / "their-lora"
    export_peft(llama_lm, [(s, 2.0)], theirs)
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(theirs / "adapter_model.safetensors"))
    save_file(tensors, str(theirs / "adapter_model.safetensors"))  # the same names, no lmswitch marker: someone else's adapter
    before = (theirs / "adapter_model.safetensors").read_bytes()
    with pytest.raises(ValueError, match="already holds other files"):
        export_peft(llama_lm, [(s, 4.0)], theirs)
    assert (theirs / "adapter_model.safetensors").read_bytes() == before
    folder = tmp_path / "model"
    llama_lm.model.save_pretrained(folder)
    llama_lm.tokenizer.save_pretrained(folder)
    lm = ls.load_model(str(folder), dtype="float32")
    for fmt in ("peft", "merged"):
        with pytest.raises(ValueError, match="holds the model itself"):
            export(lm, [(random_switch(lm, seed=1), 2.0)], folder, format=fmt, force=True)


def test_a_full_disk_is_one_clear_error_and_leaves_nothing(llama_lm, tmp_path, monkeypatch):
    """safetensors reports a write that failed (a full disk) as its own error, which reached command-line users as a
    traceback: it is now the OSError it is, naming what was being written, and nothing is left behind. (safetensors'
    writer is made to fail as it does on a full disk: a real one needs a mount.)"""
    from safetensors import SafetensorError

    def no_space(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    s = random_switch(llama_lm, seed=1, scale=20.0)
    monkeypatch.setattr("lmswitch.core.export.save_file", no_space)
    with pytest.raises(OSError, match="No space left on device") as caught:
        export_peft(llama_lm, [(s, 2.0)], tmp_path / "out")
    assert caught.value.filename == str(tmp_path / "out")
    monkeypatch.setattr("lmswitch.core.switch.save_file", no_space)
    with pytest.raises(OSError, match="No space left on device") as caught:
        s.save(tmp_path / "s.safetensors")
    assert caught.value.filename == str(tmp_path / "s.safetensors") and caught.value.errno == 28
    assert list(tmp_path.iterdir()) == []  # no folder, file or temporary

    def bad_metadata(*args, **kwargs):  # not the system's refusal: not called an I/O error
        raise SafetensorError("Error while serializing: the metadata is not a dict of strings")

    monkeypatch.setattr("lmswitch.core.switch.save_file", bad_metadata)
    with pytest.raises(SafetensorError, match="metadata"):
        s.save(tmp_path / "s.safetensors")
    assert list(tmp_path.iterdir()) == []
