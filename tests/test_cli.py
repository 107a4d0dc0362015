"""The command line, run in-process against a tiny model saved as a Hugging Face folder."""

from __future__ import annotations

import json
import re

import pytest
from conftest import build_lm, random_switch

from lmswitch.cli import main

POSITIVE = "the kind and warm one\nshe was happy with joy\nwe love the sweet smile\nthey had a great and good one"
NEGATIVE = "the cruel and cold one\nshe was sad with grief\nwe hate the bitter frown\nthey had an awful and bad one"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-llama")
    lm = build_lm("llama")
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def run(model_dir, monkeypatch, tmp_path, capsys):
    """Run the CLI on the tiny model with a private cache; returns (exit code, stdout, stderr)."""
    monkeypatch.setenv("LMSWITCH_CACHE", str(tmp_path / "cache"))

    def call(*args: str) -> tuple[int, str, str]:
        code = main(["--model", str(model_dir), "--dtype", "float32", *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return call


@pytest.fixture
def switch_file(run, tmp_path):
    (tmp_path / "pos.txt").write_text(POSITIVE)
    (tmp_path / "neg.txt").write_text(NEGATIVE)
    out = tmp_path / "s.safetensors"
    code, stdout, _ = run("train", "--positive", str(tmp_path / "pos.txt"), "--negative", str(tmp_path / "neg.txt"),
                          "--out", str(out), "--steps", "5", "--positive-label", "warm", "--negative-label", "cold", "--json")
    assert code == 0 and json.loads(stdout)["card"]["steps"] >= 1
    return out


def test_info_and_switch_card(run, switch_file):
    code, out, _ = run("info", "--json")
    assert code == 0 and json.loads(out)["hidden_size"] == 32
    code, out, _ = run("info", "--switch", str(switch_file), "--json")
    card = json.loads(out)
    assert code == 0 and card["positive_label"] == "warm" and card["negative_label"] == "cold"


def test_generate_and_sweep(run, switch_file):
    code, out, _ = run("generate", "--prompt", "the", "--switch", f"{switch_file}=3", "--max-new-tokens", "4", "--samples", "2", "--json")
    assert code == 0 and [s["seed"] for s in json.loads(out)["samples"]] == [0, 1]
    code, out, _ = run("sweep", "--prompt", "the", "--switch", str(switch_file), "--eps=-3,0,3", "--max-new-tokens", "4", "--json")
    assert code == 0 and [r["eps"] for r in json.loads(out)["rows"]] == [-3.0, 0.0, 3.0]


def test_svd_json_and_text(run, switch_file):
    code, out, _ = run("svd", "--switch", str(switch_file), "--dims", "2", "--words", "3", "--json")
    data = json.loads(out)
    assert code == 0 and len(data["dimensions"]) == 2 and len(data["dimensions"][0]["promoted"]) == 3
    assert len(data["singular_values"]) == 32 and len(data["promoted"]) == 3
    code, out, _ = run("svd", "--switch", str(switch_file), "--dims", "1", "--words", "3")
    assert code == 0 and "dim 0" in out and "↑" in out


def test_highlight_json_has_offsets_and_token_scores(run, switch_file, tmp_path):
    text = "she was happy but the cruel one was cold"
    code, out, _ = run("highlight", "--switch", str(switch_file), "--text", text, "--spans", "2", "--max-span", "2", "--json")
    data = json.loads(out)
    assert code == 0 and len(data["spans"]) == 2
    for span in data["spans"]:
        assert text[span["start"] : span["end"]] == span["text"]
    assert "".join(t["text"] for t in data["tokens"]) == text
    (tmp_path / "t.txt").write_text(text)
    code, out, _ = run("highlight", "--switch", str(switch_file), "--file", str(tmp_path / "t.txt"), "--eps=-5")
    assert code == 0 and "[[" in out


def test_train_from_docx_and_highlight_html(run, tmp_path):
    import docx

    d = docx.Document()
    for line in POSITIVE.splitlines():
        d.add_paragraph(line)
    d.save(tmp_path / "pos.docx")
    (tmp_path / "neg.html").write_text("<html><body><script>the happy joy</script>"
                                       + "".join(f"<p>{line}</p>" for line in NEGATIVE.splitlines()) + "</body></html>")
    out = tmp_path / "d.safetensors"
    code, stdout, err = run("train", "--positive", str(tmp_path / "pos.docx"), "--negative", str(tmp_path / "neg.html"),
                            "--out", str(out), "--steps", "3", "--json")
    assert code == 0, err
    card = json.loads(stdout)["card"]
    assert (card["n_positive"], card["n_negative"]) == (4, 4) and out.exists()
    (tmp_path / "t.html").write_text("<p>she was <b>happy</b> but the cruel one was cold</p><script>the sad</script>")
    code, stdout, err = run("highlight", "--switch", str(out), "--file", str(tmp_path / "t.html"), "--json")
    assert code == 0, err
    assert "".join(t["text"] for t in json.loads(stdout)["tokens"]) == "she was happy but the cruel one was cold"


def test_measure_several_switches(run, switch_file, tmp_path, model_dir):
    other = random_switch(build_lm("llama"), seed=1, name="other").save(tmp_path / "o.safetensors")
    code, out, _ = run("measure", "--switch", str(switch_file), "--switch", str(other), "--text", "she was happy with joy", "--points", "5", "--json")
    data = json.loads(out)
    assert code == 0 and [r["name"] for r in data["switches"]] == ["s", "other"]
    assert all(len(r["loglik"]) == 5 for r in data["switches"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["highlight", "--switch", "{switch}", "--text", "   "], "empty"),
        (["highlight", "--switch", "{switch}", "--text", "the one", "--max-span", "0"], "max_span"),
        (["highlight", "--switch", "{switch}", "--file", "{missing}"], "not found"),
        (["measure", "--switch", "{switch}", "--file", "{binary}"], "binary"),
        (["measure", "--switch", "{switch}", "--file", "{tmp}/b.bin"], "unsupported file type .bin"),
        (["train", "--positive", "{tmp}/broken.docx", "--out", "{tmp}/s.safetensors"], "not a valid .docx"),
        (["svd", "--switch", "{switch}", "--dims", "0"], "dims"),
        (["svd", "--switch", "{missing}"], "not found|No such file"),
        (["build-pretrained", "--only", "poetry", "--out", "{tmp}"], "no shipped switch"),
        (["build-pretrained", "--data", "{tmp}", "--out", "{tmp}"], "missing"),
        (["eval", "--report", "{tmp}/E.md", "--switches", "{tmp}"], "build-pretrained"),
        (["eval", "--switch", "{switch}", "--prompts", "no-such-set"], "no prompt set"),
        (["eval", "--switch", "{switch}", "--limit", "0"], "positive integer"),
    ],
)
def test_bad_input_exits_2_with_a_message(run, switch_file, tmp_path, args, message):
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"\x00\x01\x02" * 10)
    (tmp_path / "b.bin").write_bytes(b"\x00\x01\x02" * 10)
    (tmp_path / "broken.docx").write_bytes(b"PK not really a zip")
    filled = [a.format(switch=switch_file, missing=tmp_path / "nope.txt", binary=binary, tmp=tmp_path) for a in args]
    code, _, err = run(*filled)
    assert code == 2
    assert err.startswith("error:")
    assert re.search(message, err), err


def test_switch_for_another_model_is_refused(run, tmp_path):
    foreign = random_switch(build_lm("gpt2"), seed=0).save(tmp_path / "f.safetensors")
    code, _, err = run("highlight", "--switch", str(foreign), "--text", "the one")
    assert code == 2 and "made for" in err


def test_options_work_after_the_subcommand(model_dir, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("LMSWITCH_CACHE", str(tmp_path / "cache"))
    assert main(["info", "--model", str(model_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hidden_size"] == 32
