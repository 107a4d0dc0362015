"""The command line, run in-process against a tiny model saved as a Hugging Face folder."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import build_lm, random_switch

from lmswitch.cli import main
from lmswitch.cli.parser import build_parser, unknown_options_first
from lmswitch.core.switch import load_switch
from lmswitch.io.resources import shipped_switch_names, shipped_switch_path
from lmswitch.lenses import svd

ROOT = Path(__file__).resolve().parents[1]
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
    low, high = json.loads(run("info", "--switch", str(switch_file), "--json")[1])["card"]["fluent_eps"]
    code, out, _ = run("sweep", "--prompt", "the", "--switch", str(switch_file), "--max-new-tokens", "4", "--json")
    shown = [r["eps"] for r in json.loads(out)["rows"]]  # no --eps: across the card's fluent range, never past it
    assert code == 0 and 0.0 in shown and (min(shown), max(shown)) == (low, high) and len(shown) == len(set(shown)) >= 3
    code, out, _ = run("sweep", "--prompt", "the", "--switch", str(switch_file), "--eps=0,0.001,0.125,0.12", "--max-new-tokens", "2")
    labels = [line.split("|")[0].split()[1] for line in out.splitlines() if line.startswith("eps")]
    assert code == 0 and labels == ["+0", "+0.001", "+0.125", "+0.12"]  # as given: rows never read as the same ε


def test_generate_without_eps_steers_at_the_cards_recommended_eps(run, switch_file, tmp_path):
    """``--switch S`` alone: the card's recommended ε, inside its probed fluent range; a card without one (trained with
    --no-calibrate): the paper's 5 ε0, said on stderr."""
    from lmswitch.io.parse import FALLBACK_EPS

    card = json.loads(run("info", "--switch", str(switch_file), "--json")[1])["card"]
    assert 0 < card["recommended_eps"] <= card["fluent_eps"][1]
    code, out, err = run("generate", "--prompt", "the", "--switch", str(switch_file), "--max-new-tokens", "4", "--json")
    assert code == 0 and json.loads(out)["switches"] == [{"path": str(switch_file), "name": "s", "eps": card["recommended_eps"]}]
    assert "warning" not in err and "note" not in err and json.loads(out)["beyond_fluent"] == {}
    given = run("generate", "--prompt", "the", "--switch", f"{switch_file}={card['recommended_eps']}", "--max-new-tokens", "4", "--json")
    assert json.loads(given[1])["samples"] == json.loads(out)["samples"]
    unprobed = tmp_path / "unprobed.safetensors"
    assert run("train", "--positive", str(tmp_path / "pos.txt"), "--negative", str(tmp_path / "neg.txt"), "--out", str(unprobed), "--steps", "3", "--no-calibrate")[0] == 0
    code, out, err = run("generate", "--prompt", "the", "--switch", str(unprobed), "--max-new-tokens", "4", "--json")
    assert code == 0 and json.loads(out)["switches"][0]["eps"] == FALLBACK_EPS and "has no recommended ε in its card" in err
    assert f"(give one: --switch {unprobed}=EPS)" in err  # the path given, not the switch's name (no file of that name)


def test_generate_best_of_is_the_librarys_choice_and_bad_values_are_refused(run, switch_file, model_dir):
    import lmswitch as ls

    code, out, _ = run("generate", "--prompt", "the", "--switch", f"{switch_file}=3", "--max-new-tokens", "6", "--seed", "2",
                       "--best-of", "3", "--json")
    lm = ls.load_model(str(model_dir), dtype="float32")
    want = ls.generate(lm, "the", [(ls.load_switch(switch_file, lm), 3.0)], seed=2, max_new_tokens=6, best_of=3)
    assert code == 0 and [s["text"] for s in json.loads(out)["samples"]] == want
    code, _, err = run("generate", "--prompt", "the", "--max-new-tokens", "2", "--best-of", "0")
    assert code != 0 and "--best-of must be an integer from 1 to 16" in err


def test_generate_guided_is_the_librarys_choice(run, switch_file, model_dir):
    import lmswitch as ls

    lm = ls.load_model(str(model_dir), dtype="float32")
    switch = ls.load_switch(switch_file, lm)
    assert switch.judge is not None  # trained from two sides: the switch file carries its judge
    code, out, _ = run("generate", "--prompt", "the", "--switch", f"{switch_file}=3", "--max-new-tokens", "8", "--seed", "2",
                       "--guide", "3", "--json")
    want = ls.generate(lm, "the", [(switch, 3.0)], seed=2, max_new_tokens=8, guide=3)
    assert code == 0 and [s["text"] for s in json.loads(out)["samples"]] == want
    code, _, err = run("generate", "--prompt", "the", "--switch", f"{switch_file}=3", "--max-new-tokens", "2", "--guide", "9")
    assert code != 0 and "guide must be an integer from 1 (off) to 8" in err


def test_generate_repeat_guard_is_the_librarys_and_bad_values_are_refused(run, switch_file, model_dir):
    import lmswitch as ls

    lm = ls.load_model(str(model_dir), dtype="float32")
    switch = ls.load_switch(switch_file, lm)
    for guard in ("0", "2"):
        code, out, _ = run("generate", "--prompt", "the happy", "--switch", f"{switch_file}=8", "--max-new-tokens", "10",
                           "--seed", "1", "--samples", "3", "--repeat-guard", guard, "--json")
        want = ls.generate(lm, "the happy", [(switch, 8.0)], seed=1, samples=3, max_new_tokens=10, repeat_guard=int(guard))
        assert code == 0 and [s["text"] for s in json.loads(out)["samples"]] == want
    code, _, err = run("generate", "--prompt", "the", "--max-new-tokens", "2", "--repeat-guard", "-1")
    assert code != 0 and "--repeat-guard must be an integer from 0 (off) to 64" in err


def test_svd_json_and_text(run, switch_file):
    code, out, _ = run("svd", "--switch", str(switch_file), "--dims", "2", "--words", "3", "--json")
    data = json.loads(out)
    assert code == 0 and len(data["dimensions"]) == 2 and len(data["dimensions"][0]["promoted"]) == 3
    assert len(data["singular_values"]) == 32 and len(data["promoted"]) == 3
    code, out, _ = run("svd", "--switch", str(switch_file), "--dims", "1", "--words", "3")
    assert code == 0 and "dim 0" in out and "↑" in out
    assert svd.RARE_NOTE not in out and svd.RARE_MARK not in out  # every listed word is one the tiny model writes


def test_svd_text_marks_the_words_the_model_rarely_writes(run, switch_file, monkeypatch):
    monkeypatch.setattr(svd, "WRITTEN_SHARE", 1.0)  # about half a tiny model's words then count as rarely written
    code, out, _ = run("svd", "--switch", str(switch_file), "--dims", "1", "--words", "40")
    data = json.loads(run("svd", "--switch", str(switch_file), "--dims", "1", "--words", "40", "--json")[1])
    rare = [w["word"] for w in data["promoted"] if not w["written"]]
    assert code == 0 and rare and svd.RARE_NOTE in out
    assert all(f"{word}{svd.RARE_MARK}" in out for word in rare)


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
    code, out, _ = run("highlight", "--switch", str(switch_file), "--text", text, "--spans", "9", "--max-span", "1")
    shown = [line for line in out.splitlines() if line.startswith("span ")]
    assert code == 0 and all("Δ=+" in line for line in shown)  # only what reads toward the side
    assert len(shown) == 9 or f"{len(shown)} of the 9 spans asked read toward" in out
    flat = load_switch(switch_file)
    flat.W = torch.zeros_like(flat.W)  # Δ = 0 everywhere: no span reads toward either side
    flat.save(tmp_path / "flat.safetensors")
    code, out, _ = run("highlight", "--switch", str(tmp_path / "flat.safetensors"), "--text", text)
    assert code == 0 and out.strip() == "no span reads toward warm (summed Δ > 0)"  # the text is not echoed unmarked


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


def test_a_document_switch_is_labelled_by_its_data_unless_labels_are_given(run, tmp_path):
    (tmp_path / "doc.txt").write_text(" ".join(POSITIVE.splitlines() * 3))
    out = tmp_path / "doc.safetensors"
    for extra, labels in (([], "+eps → like the document, -eps → unlike the document"), (["--negative-label", "plain"],
                                                                                          "+eps → like the document, -eps → plain")):
        code, _, err = run("train", "--positive", str(tmp_path / "doc.txt"), "--document", "--out", str(out), "--force", "--steps", "3",
                           "--no-calibrate", *extra)
        assert code == 0, err
        assert labels in run("info", "--switch", str(out))[1]


def test_measure_several_switches(run, switch_file, tmp_path, model_dir):
    other = random_switch(build_lm("llama"), seed=1, name="other").save(tmp_path / "o.safetensors")
    code, out, _ = run("measure", "--switch", str(switch_file), "--switch", str(other), "--text", "she was happy with joy", "--points", "5", "--json")
    data = json.loads(out)
    assert code == 0 and [r["name"] for r in data["switches"]] == ["s", "other"]
    assert all(len(r["loglik"]) == 5 for r in data["switches"])
    code, out, _ = run("measure", "--switch", str(switch_file), "--switch", str(other), "--text", "she was happy with joy", "--points", "5")
    for row in data["switches"]:  # the text says which readings are too weak to mean much (below 1 nat)
        line = next(x for x in out.splitlines() if x.startswith(f"{row['name']}: best eps"))
        assert ("weak: the side means little" in line) == (row["evidence_nats"] < 1.0), line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["highlight", "--switch", "{switch}", "--text", "   "], "empty"),
        (["highlight", "--switch", "{switch}", "--text", "the one", "--max-span", "0"], "^error: --max-span must be an integer from 1"),
        (["highlight", "--switch", "{switch}", "--text", "the one", "--spans", "0"], "^error: --spans must be an integer from 1"),  # (n_spans)
        (["measure", "--switch", "{switch}", "--text", "the one", "--points", "1"], "^error: --points must be an integer from 2"),
        (["highlight", "--switch", "{switch}", "--file", "{missing}"], "not found"),
        (["measure", "--switch", "{switch}", "--file", "{binary}"], "binary"),
        (["measure", "--switch", "{switch}", "--file", "{tmp}/b.bin"], "unsupported file type .bin"),
        (["train", "--positive", "{tmp}/broken.docx", "--document", "--out", "{tmp}/new.safetensors"], "not a valid .docx"),
        (["svd", "--switch", "{switch}", "--dims", "0"], "^error: --dims must be an integer from 1"),
        (["svd", "--switch", "{missing}"], "no such file: .* one of: .*sentiment"),
        (["build-pretrained", "--only", "poetry", "--out", "{tmp}"], "no shipped switch"),
        (["build-pretrained", "--data", "{tmp}", "--out", "{tmp}"], "missing"),
        (["eval", "--report", "{tmp}/E.md", "--switches", "{tmp}"], "build-pretrained"),
        (["eval", "--switch", "{switch}", "--prompts", "no-such-set"], "no prompt set"),
        (["eval", "--switch", "{switch}", "--prompts", "{tmp}"], "no prompt set .*is a folder"),
        (["eval", "--switch", "{switch}", "--limit", "0"], "^error: --limit must be a positive integer"),
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


# --- shipped switches by name, and the one parser for switch settings ------------------------------

# `info --switch --json` keys, in order: scripts read these (the card's own keys come from the switch file)
INFO_SWITCH_KEYS = {
    "path": str, "name": str, "description": str, "eps0": float, "eps_range": list, "positive_label": str,
    "negative_label": str, "model_name": str, "model_fingerprint": str, "card": dict, "dim": int,
}


def test_info_of_a_shipped_switch_by_name_from_any_folder(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("lmswitch.cli.commands.run", lambda args: pytest.fail("info --switch went the way of the commands that load a model"))
    assert main(["info", "--switch", "sentiment", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data) == list(INFO_SWITCH_KEYS)
    assert all(isinstance(data[k], t) for k, t in INFO_SWITCH_KEYS.items())
    assert data["path"] == "sentiment" and data["name"] == "sentiment"  # echoes what was typed
    assert not any("losses" in k for k in data["card"])


def test_info_text_leaves_out_what_the_run_did_not_use(monkeypatch, tmp_path, capsys):
    """The shipped sentiment switch was trained with L-BFGS: Adam's settings say nothing of it (--json keeps them)."""
    monkeypatch.chdir(tmp_path)
    assert main(["info", "--switch", "sentiment"]) == 0
    out = capsys.readouterr().out
    shown = {line.split(":")[0].strip() for line in out.splitlines()}
    assert {"steps", "l2", "optimizer"} <= shown and not shown & {"lr", "batch_tokens", "min_steps", "data_shape"}
    # a nested entry is indented under its key, each ε's row of the evaluation on a line of its own (all on one line
    # as a Python dict before), numbers to four figures
    assert "{" not in out and "  evaluation:\n    prompts: neutral" in out and "\n  data:\n    dataset: sentiment\n" in out
    row = next(line for line in out.splitlines() if line.startswith("      +4: "))
    assert "positive_share 0.7, " in row and re.search(r"perplexity \d+\.\d{1,2},", row)
    assert main(["info", "--switch", "sentiment", "--json"]) == 0
    assert {"lr", "batch_tokens", "min_steps"} <= set(json.loads(capsys.readouterr().out)["card"])


def test_info_of_a_file_that_is_no_switch_says_what_a_switch_is(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("my switch ideas")
    assert main(["info", "--switch", str(notes)]) == 2
    err = capsys.readouterr().err
    assert "notes.txt is not a switch file: a switch is a .safetensors file" in err and "corrupted" not in err


def test_info_json_keys_of_a_switch_file(run, switch_file):
    code, out, _ = run("info", "--switch", str(switch_file), "--json")
    data = json.loads(out)
    assert code == 0 and list(data) == list(INFO_SWITCH_KEYS) and data["path"] == str(switch_file)


def test_unknown_switch_name_exits_2_listing_the_shipped_ones(capsys):
    assert main(["info", "--switch", "no-such-switch"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "no-such-switch" in err
    assert shipped_switch_names() and all(name in err for name in shipped_switch_names())


def test_switches_joined_by_a_comma_get_the_hint_to_give_them_one_by_one(capsys):
    assert main(["generate", "--prompt", "Hi", "--switch", "sentiment=2,formality=1"]) == 2
    assert "give several switches one by one (on the command line: --switch sentiment=2 --switch formality=1)" in capsys.readouterr().err


def test_shipped_switch_for_another_model_is_refused_by_name(run):
    code, _, err = run("generate", "--prompt", "the", "--switch", "sentiment=6", "--max-new-tokens", "2")
    assert code == 2 and "made for" in err


def test_an_unknown_command_is_answered_with_the_command_meant(capsys):
    """The app's tab is Inspect and the MCP tool steer_text: argparse said "invalid choice" and listed all twelve."""
    for argv, said in ((["inspect", "--switch", "sentiment"], "'inspect' is not a command; did you mean 'svd'?"),
                       (["--model", "m", "steer", "--prompt", "Hi"], "'steer' is not a command; did you mean 'generate'?"),
                       (["genrate"], "did you mean 'generate'?"),
                       (["--mod", "m", "SVD"], "'SVD' is not a command; did you mean 'svd'?"),  # --mod: argparse's prefix
                       (["--dtype", "float32", "poems"], "'poems' is not a command (the commands: info, train")):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and said in err, (argv, err)


def test_an_unknown_option_is_named_first_with_the_nearest_known_one(capsys):
    """``generate --swtich sentiment`` said "--prompt is required"; with --prompt added, only "unrecognized arguments"."""
    for argv, said in ((["generate", "--swtich", "sentiment"], "unrecognized option --swtich; did you mean --switch?"),
                       (["--model", "m", "sweep", "--prompt", "Hi", "--eps=1", "--swtich=x"], "unrecognized option --swtich; did you mean --switch?"),
                       (["train", "--zzz"], "unrecognized option --zzz (see python -m lmswitch train --help)")):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and said in err and "required" not in err, (argv, err)
    # an unambiguous prefix of a known option, a value with a space, and what follows "--" are argparse's to read
    args = build_parser().parse_args(["generate", "--prom", "--a b", "--switch", "sentiment"])
    assert args.prompt == "--a b"
    for argv in (["generate", "--prom", "--a b"], ["generate", "--prompt", "Hi", "--max", "3"]):
        main_parser = build_parser()
        unknown_options_first(main_parser, argv)  # nothing refused


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["generate", "--prompt", "Hi", "--switch", "sentiment=abc"], r"argument --switch: the ε of 'sentiment' must be a number; got 'abc'"),
        (["generate", "--prompt", "Hi", "--switch", "=5"], r"argument --switch: expected NAME=EPS or PATH=EPS"),
        (["sweep", "--prompt", "Hi", "--switch", "sentiment", "--eps", "1,x"], r"argument --eps: ε values must be numbers"),
        (["sweep", "--prompt", "Hi", "--switch", "sentiment", "--eps", ",".join(["1"] * 16)], r"argument --eps: at most 15 ε values"),
        (["eval", "--eps", ",".join(["1"] * 102)], r"argument --eps: at most 101 ε values"),
        # a command of one switch kept the last of two silently, and took sentiment=2 for a file's name
        (["sweep", "--prompt", "Hi", "--switch", "sentiment", "--switch", "detox"], r"--switch is given twice; sweep takes one switch"),
        (["svd", "--switch", "a", "--switch", "b"], r"--switch is given twice; svd takes one switch"),
        (["sweep", "--prompt", "Hi", "--switch", "sentiment=2"],
         r"--switch sentiment=2: sweep takes the switch without =EPS \(--switch sentiment\); give its ε with --eps"),
        (["highlight", "--switch", "detox=−4", "--text", "x"], r"highlight takes the switch without =EPS \(--switch detox\); give its ε with --eps"),
        (["svd", "--switch", "sentiment=1"], r"svd takes the switch without =EPS \(--switch sentiment\)$"),
    ],
)
def test_bad_switch_settings_are_usage_errors(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err, re.MULTILINE)


def test_switch_settings_parse_with_the_shared_parser():
    from lmswitch.cli import build_parser
    from lmswitch.core.options import SAMPLING

    args = build_parser().parse_args(["generate", "--prompt", "Hi", "--switch", "sentiment=6", "--switch", "some/file.safetensors"])
    assert args.switch == [("sentiment", 6.0), ("some/file.safetensors", None)]  # no =EPS: the card's recommended ε
    assert (args.max_new_tokens, args.temperature, args.top_p, args.chat) == (SAMPLING.max_new_tokens, SAMPLING.temperature,
                                                                              SAMPLING.top_p, SAMPLING.chat)
    assert build_parser().parse_args(["eval", "--eps", ",".join(["0.5"] * 101)]).eps == [0.5] * 101


def test_the_command_line_defaults_are_the_librarys():
    """The parser reads the constants the library's signatures read: the two cannot drift apart."""
    import inspect

    from lmswitch.cli import build_parser
    from lmswitch.core.export import export
    from lmswitch.core.generate import generate, sweep
    from lmswitch.core.options import OPTIMIZERS
    from lmswitch.core.solver import RECIPES
    from lmswitch.core.train import train_switch
    from lmswitch.core.transfer import transfer
    from lmswitch.harness.frontier import METHODS as FRONTIER_METHODS
    from lmswitch.harness.pretrained import build_pretrained
    from lmswitch.lenses.meter import measure
    from lmswitch.lenses.spans import highlight
    from lmswitch.lenses.svd import svd_dimensions

    text = ["--switch", "s", "--text", "t"]
    cases = [(["generate", "--prompt", "x"], generate, {"seed": "seed", "samples": "samples"}),
             (["sweep", "--prompt", "x", "--switch", "s"], sweep, {"seed": "seed"}),
             (["train", "--positive", "p", "--negative", "n", "--out", "o"], train_switch,
              {"description": "description", "positive_label": "positive_label", "negative_label": "negative_label"}),
             (["svd", "--switch", "s"], svd_dimensions, {"dims": "dims", "words": "words"}),
             (["highlight", *text], highlight, {"eps": "eps", "max_span": "max_span", "spans": "n_spans"}),
             (["measure", *text], measure, {"points": "points"}),
             (["build-pretrained"], build_pretrained, {"eval_prompts": "eval_prompts", "samples": "samples", "seed": "seed"}),
             (["transfer", "--switch", "s", "--to", "m", "--out", "o"], transfer, {"anchors": "anchors", "min_anchors": "min_anchors"}),
             (["export", "--switch", "s", "--out", "o"], export, {"format": "format"})]
    for argv, fn, names in cases:
        args, params = build_parser().parse_args(argv), inspect.signature(fn).parameters
        assert {dest: getattr(args, dest) for dest in names} == {dest: params[p].default for dest, p in names.items()}, argv
    assert build_parser().parse_args(["eval"]).methods == ",".join(FRONTIER_METHODS)  # the names the parser lists, the dict's
    assert OPTIMIZERS == (*RECIPES, "adam")  # --optimizer's choices: the solver's recipes (named in torch-free options)


def test_help_and_a_mistyped_command_do_not_import_the_library():
    """Every subcommand's defaults come from torch-free option modules, so its --help (like the top --help and a mistyped
    command) answers in well under a second."""
    import subprocess
    import sys

    from lmswitch.cli.parser import SUBCOMMANDS

    argvs = [["--help"], ["generat"], *([name, "--help"] for name in SUBCOMMANDS)]
    script = (f"import sys\nfrom lmswitch.cli import main\nfor argv in {argvs!r}:\n"
              "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
              "print(sorted(m for m in ('torch', 'transformers', 'gradio') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.stdout.strip().splitlines()[-1:] == ["[]"], done.stdout + done.stderr
    assert "'generat' is not a command; did you mean 'generate'?" in done.stderr
    assert all(f"usage: python -m lmswitch {name} " in done.stdout for name in SUBCOMMANDS), done.stdout


def test_every_option_says_what_it_does_and_its_default():
    import argparse

    from lmswitch.cli.parser import SUBCOMMANDS, build_parser

    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name in SUBCOMMANDS:
        parser = subparsers[name]
        shown = " ".join(parser.format_help().split())
        for action in parser._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            assert action.help, f"{name} {action.option_strings[-1]} has no help"
            if action.nargs == 0:  # a flag: given or not, no default to show ("--no-calibrate … (default True)" misled)
                assert "(default" not in " ".join(parser._get_formatter()._get_help_string(action).split()), (name, action.option_strings[-1])
            elif action.default not in (None, False, [], argparse.SUPPRESS) and not action.required:
                assert "default" in action.help or f"(default {action.default})" in shown, (name, action.option_strings[-1])


def test_a_switch_card_and_a_refused_combination_do_not_import_the_model_libraries():
    """``info --switch`` needs no model, and options refused before loading one are refused at once: neither imports
    transformers (seconds), only torch (a switch is a tensor)."""
    import subprocess
    import sys

    script = ("import json, sys\nfrom lmswitch.cli import main\n"
              "code = main(['info', '--switch', 'sentiment', '--json'])\n"
              "refused = main(['--offload-folder', 'd', 'generate', '--prompt', 'Hi'])\n"
              "swept = main(['eval', '--switch', 'sentiment', '--samples', '0'])\n"  # eval's checks: no harness, no plotly
              "print(json.dumps([code, refused, swept, sorted(m for m in ('transformers', 'gradio', 'plotly') if m in sys.modules)]))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    *card, last = done.stdout.strip().splitlines()
    assert json.loads(last) == [0, 2, 2, []], done.stdout + done.stderr
    assert json.loads("\n".join(card))["name"] == "sentiment"
    assert "add --device-map auto" in done.stderr and "--samples must be an integer from 1" in done.stderr


@pytest.mark.real_model
def test_generate_with_a_shipped_switch_by_name(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["generate", "--prompt", "Hi", "--switch", "sentiment=6", "--max-new-tokens", "3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["switches"] == [{"path": "sentiment", "name": "sentiment", "eps": 6.0}] and len(data["samples"]) == 1
    # beyond the card's fluent range: the JSON says so as the OpenAI API does, not only stderr
    card = load_switch(shipped_switch_path("sentiment")).card
    assert card.beyond_fluent(6.0) and data["beyond_fluent"] == {"sentiment": f"ε +6 is beyond its fluent range {card.fluent_text}: "
                                                                               "expect text that reads less well"}
    assert main(["generate", "--prompt", "Hi", "--switch", "sentiment", "--max-new-tokens", "3", "--json"]) == 0
    out = capsys.readouterr()  # the shipped card's recommended ε, not the paper's 5 (beyond its fluent range, with a warning)
    assert json.loads(out.out)["switches"] == [{"path": "sentiment", "name": "sentiment", "eps": card.recommended_eps}]
    assert "warning" not in out.err and json.loads(out.out)["beyond_fluent"] == {}


def test_demo_sweeps_only_inside_the_fluent_range_it_measured(run):
    code, out, err = run("demo", "--steps", "5", "--prompt", "the")
    assert code == 0 and "probing its fluent ε range" in err
    assert re.search(r"trained in [\d.]+ s; Held-out gain [-+]?[\d.]+ nats/token", err)  # what train says of the data too
    head, *rows = [line for line in out.splitlines() if line.strip()]
    low, high = (float(x) for x in re.search(r"fluent ε (\S+) … (\S+);", head).groups())
    shown = [float(re.match(r"eps\s+(\S+) \|", row).group(1)) for row in rows if row.startswith("eps")]
    assert 0.0 in shown and min(shown) == low and max(shown) == high  # never past the calibrated range
    code, out, _ = run("demo", "--steps", "5", "--prompt", "the", "--json")
    data = json.loads(out)  # the same, as JSON only
    assert code == 0 and data["fluent_eps"] == [low, high] and [row["eps"] for row in data["sweep"]] == shown


def test_options_that_make_no_sense_together_are_refused_before_loading(capsys):
    for argv, said in ((["eval", "--sliders"], "add --frontier"),
                       (["build-pretrained", "--recalibrate", "--no-calibrate"], "drop --no-calibrate"),
                       # one side of examples: trained as if it were all (the card said "+ε → positive, −ε → negative")
                       (["train", "--positive", "p.txt", "--out", "o.safetensors"], "add --negative FILE (examples of the other style), --self-contrast"),
                       # an eval option its mode does not read would be silently ignored (the report's fixed suite, say)
                       (["eval", "--report", "E.md", "--quick", "--limit", "1", "--samples", "1"], "--limit, --samples do not apply to eval --report"),
                       (["eval", "--switch", "sentiment", "--quick"], "--quick does not apply to a sweep or grid"),
                       (["eval", "--frontier", "sentiment", "--guide", "4"], "--guide does not apply to eval --frontier"),
                       (["eval", "--stance", "--frontier", "sentiment"], "one of --stance, --highlight, --frontier"),
                       (["eval", "--switch", "sentiment", "--png"], "add --out DIR"),
                       # values refused without the model: before it loads (a typo cost 5–8 s of loading)
                       (["generate", "--prompt", "Hi", "--switch", "sentimnt=1"], "no switch file 'sentimnt'"),
                       (["generate", "--prompt", "Hi", "--samples", "0"], "--samples must be an integer from 1"),
                       (["svd", "--switch", "sentiment", "--dims", "0"], "--dims must be an integer from 1"),
                       (["highlight", "--switch", "detox", "--text", "Hi", "--spans", "0"], "--spans must be an integer from 1"),
                       (["highlight", "--switch", "detox", "--text", "Hi", "--eps", "0"], "--eps must be a finite non-zero number"),
                       (["eval", "--switch", "sentiment", "--limit", "0"], "--limit must be a positive integer"),
                       (["eval", "--switch", "sentiment", "--top-p", "5"], "--top-p must be a number from 0 to 1"),
                       # adaptive strength's budgets change nothing without it
                       (["generate", "--prompt", "Hi", "--kl-budget", "1"], "add --adaptive"),
                       (["sweep", "--switch", "s", "--prompt", "Hi", "--generation-budget", "2"], "add --adaptive"),
                       # with no switch the text was the model's own, --guide and --adaptive ignored without a word
                       (["generate", "--prompt", "Hi", "--guide", "4"], "--guide keeps the candidates a switch's judge prefers, and no --switch"),
                       (["generate", "--prompt", "Hi", "--adaptive"], "--adaptive limits a switch's steering, and no --switch is given"),
                       # a map fitted on fewer words than --min-anchors, or with none held out to measure its fit
                       (["transfer", "--switch", "s", "--to", "m", "--out", "o.safetensors", "--anchors", "20"],
                        "--anchors 20 is below --min-anchors 200"),
                       (["transfer", "--switch", "s", "--to", "m", "--out", "o.safetensors", "--anchors", "5", "--min-anchors", "5"],
                        "--anchors must be an integer ≥ 10 (one in ten is held out")):
        assert main(["--model", "no-such-model", *argv]) == 2
        assert said in capsys.readouterr().err, argv
    for argv in (["eval", "--frontier", "sentiment", "--report", "E.md", "--limit", "3"], ["eval", "--switch", "sentiment", "--out", "o", "--png"],
                 ["eval", "--stance", "--out", "o"], ["eval", "--transfer-to", "gemma3-270m", "--switches", "s"],
                 ["generate", "--prompt", "Hi", "--switch", "sentiment", "--adaptive", "--kl-budget", "1"],
                 ["generate", "--prompt", "Hi", "--switch", "sentiment", "--guide", "4"], ["generate", "--prompt", "Hi", "--best-of", "2"],
                 ["train", "--positive", "p.txt", "--self-contrast", "--out", "o.safetensors"]):  # (the model's text: side two)
        assert main(["--model", "no-such-model", *argv]) == 2  # each option read by its mode: on to loading the model
        assert "Cannot find model 'no-such-model'" in capsys.readouterr().err, argv


def test_an_output_folder_or_report_that_cannot_be_written_is_refused_before_loading(capsys, tmp_path, monkeypatch):
    """export, eval and build-pretrained check where they write before any work (a sweep or a build takes minutes to
    hours), and expand ``~`` there as train does."""
    (tmp_path / "afile").write_text("a file")
    (tmp_path / "others").mkdir()
    (tmp_path / "others" / "notes.txt").write_text("a user's file")
    for argv, said in ((["export", "--switch", "sentiment", "--out", "{tmp}/afile/sub"], "afile is a file, not a folder"),
                       (["export", "--switch", "sentiment", "--out", "{tmp}/afile"], "is a file; give a folder"),
                       (["export", "--switch", "sentiment", "--out", "{tmp}/others"], "already holds other files"),
                       (["export", "--switch", "sentiment", "--format", "gguf-lora", "--out", "{tmp}/others"], "already holds other files"),
                       (["export", "--switch", "sentiment", "--out", ""], "(out, --out) is empty"),
                       (["eval", "--switch", "sentiment", "--out", "{tmp}/afile"], "is a file; give a folder"),
                       (["build-pretrained", "--out", "{tmp}/afile/x"], "is a file, not a folder"),
                       (["eval", "--report", "{tmp}"], "is a folder; give a file name"),
                       (["eval", "--report", "{tmp}/afile/E.md", "--quick"], "is a file, not a folder"),
                       # permission bits say yes to root there; a file made and removed says no (it failed after the work)
                       (["export", "--switch", "sentiment", "--out", "/proc/lmswitch-export"], "/proc takes no new files"),
                       (["build-pretrained", "--out", "/proc/x"], "/proc takes no new files"),
                       (["train", "--positive", "{tmp}/afile", "--document", "--out", "/proc/x.safetensors"], "/proc takes no new files")):
        assert main(["--model", "no-such-model", *(a.format(tmp=tmp_path) for a in argv)]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error:") and said in err, (argv, err)
    assert main(["--model", str(tmp_path / "others"), "export", "--switch", "sentiment", "--out", str(tmp_path / "others"), "--force"]) == 2
    assert "holds the model itself" in capsys.readouterr().err  # --force writes beside other files, never into the model's
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["--model", "no-such-model", "export", "--switch", "sentiment", "--out", "~/afile"]) == 2
    assert f"{tmp_path}/afile is a file" in capsys.readouterr().err  # ~ is the home folder, not a folder named "~"


def test_a_probe_interrupted_after_training_keeps_the_switch_and_says_so(run, tmp_path, monkeypatch):
    """Ctrl+C during the fluent-range probe said only "interrupted", though the switch was saved (without its range), and
    the same command again met "exists; pass --force"."""
    from lmswitch.cli import commands

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "calibrated_card", interrupted)
    (tmp_path / "pos.txt").write_text(POSITIVE)
    (tmp_path / "neg.txt").write_text(NEGATIVE)
    out = tmp_path / "kept.safetensors"
    code, _, err = run("train", "--positive", str(tmp_path / "pos.txt"), "--negative", str(tmp_path / "neg.txt"), "--out", str(out),
                       "--steps", "3")
    assert code == 130 and out.exists() and load_switch(out).card.fluent_eps is None
    assert f"{out} is saved without its fluent ε range: the probe was interrupted (run the command again with --force" in err


def test_train_says_whether_its_data_sufficed_and_a_refused_input_prints_only_its_error(run, tmp_path):
    (tmp_path / "pos.txt").write_text(POSITIVE)
    (tmp_path / "neg.txt").write_text(NEGATIVE)
    out = tmp_path / "s.safetensors"
    code, stdout, err = run("train", "--positive", str(tmp_path / "pos.txt"), "--negative", str(tmp_path / "neg.txt"),
                            "--out", str(out), "--steps", "5", "--no-calibrate")
    assert code == 0 and (err == "" or err.endswith("\n"))  # a bar, when one is drawn (runs over 1 s), ends its line
    assert stdout.startswith(f"saved {out}") and "\nwarning: Very little text" in stdout  # the card's data advice, flagged as the app flags it
    code, stdout, _ = run("train", "--positive", str(tmp_path / "pos.txt"), "--negative", str(tmp_path / "neg.txt"), "--out", str(out),
                          "--force", "--steps", "5", "--no-calibrate", "--json")
    said = json.loads(stdout)
    assert code == 0 and said["advice"].startswith("Very little text") and said["may_not_generalise"] is True
    code, stdout, err = run("train", "--positive", str(tmp_path / "pos.txt"), "--negative", str(tmp_path / "pos.txt"), "--out",
                            str(tmp_path / "same.safetensors"), "--steps", "5")
    assert code == 2 and "identical" in err and "training" not in err and not (tmp_path / "same.safetensors").exists()


def test_where_a_switch_goes_and_its_name_are_checked_before_the_model_loads(tmp_path, capsys):
    """A bad --out or --name is refused at once (the model named here does not exist, so nothing else ran), not after
    the training: the folder, the suffix, an existing file without --force, a path through a file, a read-only folder."""
    pos = tmp_path / "pos.txt"
    pos.write_text(POSITIVE)
    (tmp_path / "folder.safetensors").mkdir()
    (tmp_path / "kept.safetensors").write_bytes(b"an earlier switch")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    cases = [(["--out", str(tmp_path / "s.st")], "end in .safetensors"),
             (["--out", str(tmp_path / "folder.safetensors")], "is a folder"),
             (["--out", str(tmp_path / "kept.safetensors")], "exists.*--force"),
             (["--out", str(pos / "s.safetensors")], "is a file, not a folder"),
             (["--out", str(tmp_path / "s.safetensors"), "--name", "two words"], "switch names are")]
    if os.geteuid() != 0:  # (root writes anywhere)
        cases.append((["--out", str(locked / "s.safetensors")], "no permission"))
    try:
        for extra, said in cases:
            assert main(["--model", "no-such-model", "train", "--positive", str(pos), "--document", *extra]) == 2, extra
            err = capsys.readouterr().err
            assert err.startswith("error:") and re.search(said, err), (extra, err)
    finally:
        locked.chmod(0o700)
    assert (tmp_path / "kept.safetensors").read_bytes() == b"an earlier switch"
    assert main(["--model", "no-such-model", "measure", "--switch", "sentiment", "--switch", "sentiment", "--text", "Hi there"]) == 2
    assert "given twice" in capsys.readouterr().err
    assert main(["--model", "no-such-model", "generate", "--prompt", "Hi", "--switch", "sentiment=2", "--switch", "sentiment=-2"]) == 2
    assert "given twice" in capsys.readouterr().err
    copy = shipped_switch_path("sentiment")  # by name and by its file's path: the effect would be doubled without a word
    assert main(["--model", "no-such-model", "export", "--switch", "sentiment=2", "--switch", f"{copy}=2", "--out", str(tmp_path / "x")]) == 2
    assert f"--switch sentiment and --switch {copy} (the same file) are one switch" in capsys.readouterr().err
    shutil.copy(copy, tmp_path / "mine.safetensors")  # a copy of its file: the same matrix (it was steered with twice)
    assert main(["--model", "no-such-model", "generate", "--prompt", "Hi", "--switch", "sentiment=1",
                 "--switch", f"{tmp_path / 'mine.safetensors'}=2"]) == 2
    assert f"--switch sentiment and --switch {tmp_path / 'mine.safetensors'} (the same matrix) are one switch" in capsys.readouterr().err


def test_a_home_relative_out_is_written_where_it_is_read(run, tmp_path, monkeypatch):
    """``--out=~/…`` (the shell leaves ``~`` after ``=`` alone) is the home folder's, as ``--switch`` reads it."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pos.txt").write_text(POSITIVE)
    (tmp_path / "neg.txt").write_text(NEGATIVE)
    code, _, err = run("train", "--positive", str(tmp_path / "pos.txt"), "--negative", str(tmp_path / "neg.txt"),
                       "--out=~/switches/mood.safetensors", "--steps", "3", "--no-calibrate")
    assert code == 0, err
    assert (tmp_path / "home" / "switches" / "mood.safetensors").is_file() and not (tmp_path / "~").exists()
    code, out, err = run("info", "--switch", "~/switches/mood.safetensors")
    assert code == 0 and out.startswith("mood:"), err


def test_a_broken_model_is_refused_with_a_message(tmp_path, monkeypatch, capsys):
    """A model folder without its weights, a GGUF file cut short (interrupted downloads): a message, not a traceback."""
    monkeypatch.setenv("LMSWITCH_CACHE", str(tmp_path / "cache"))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "cut.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "cut" / "model.safetensors").write_bytes(b"weights")
    for model, said in ((tmp_path / "m", "incomplete or unreadable"), (tmp_path / "cut.gguf", "not a complete GGUF file"),
                        (tmp_path / "cut", "incomplete or unreadable"),  # its weights cut short
                        (tmp_path / "cut" / "model.safetensors", "a file, but not a .gguf file: give the model's folder")):
        assert main(["--model", str(model), "info"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error:") and said in err, err


def test_eval_highlight_and_stance_write_their_json_and_report_section(run, model_dir, tmp_path, monkeypatch):
    """Both evaluations publish alike: DIR/NAME.json with the command, their section of the report file, the text."""
    from lmswitch.harness import highlight_report, stance

    rate = highlight_report.HitRate(1.0, 8, 0.9, 0.8, 0.85, 0.33, 6)
    fake = [highlight_report.SwitchHitRates("detox", [rate], rate, rate, rate, rate)]
    monkeypatch.setattr(highlight_report, "run_highlight_report", lambda lm, switches, log: fake)
    monkeypatch.setattr("lmswitch.cli.evaluate.load_switch", lambda path, lm: None)  # the shipped ones fit no tiny model
    monkeypatch.setattr(stance, "run_stance", lambda lm, methods, log: stance.StanceReport([], [], {"plain": 4.0}))
    report = tmp_path / "EVAL.md"
    report.write_text("# Evaluation\n\n## Other\n\nkept\n", encoding="utf-8")
    for flag, name, heading in (("--highlight", "highlight", "## Highlighting (dev → test)"),
                                ("--stance", "stance", "## Stance from documents (dev → test)")):
        code, out, err = run("eval", flag, "--out", str(tmp_path / "out"), "--report", str(report))
        assert code == 0, err
        data = json.loads((tmp_path / "out" / f"{name}.json").read_text(encoding="utf-8"))
        command = (f"python -m lmswitch --model {model_dir} --dtype float32 eval {flag} --out {tmp_path / 'out'} "
                   f"--report {report}")  # main's own arguments, not pytest's
        assert data == {name: data[name], "command": command}
        text = report.read_text(encoding="utf-8")
        assert f"{heading}\n\nCommand: `{command}`" in text and "## Other\n\nkept" in text
        assert out.strip() and out.strip() in text  # the terminal gets the section's body
    assert "detox: chosen on dev" in report.read_text(encoding="utf-8")


def test_a_multi_line_text_stays_in_its_rows_column():
    """A generation's later lines sat at the left edge, where the next row's ε is read (sweep, demo, generate)."""
    from lmswitch.cli.commands import _row

    assert _row("eps     +2", "My day was\nfine.\n") == "eps     +2 | My day was\n           | fine.\n           | "
    assert _row("[seed 0]", "one line") == "[seed 0] | one line"


def test_a_list_of_eps_that_starts_with_a_minus_needs_no_equals_sign(run, switch_file):
    """``--eps -2,0,2`` was refused with "expected one argument" (argparse reads "-2,0,2" as an option; "-2" it takes)."""
    from lmswitch.cli.parser import values_after_options

    assert values_after_options(["sweep", "--eps", "-2,0,2", "--seed", "-1", "--json"]) == ["sweep", "--eps=-2,0,2", "--seed=-1", "--json"]
    assert values_after_options(["--eps", "−2, 0", "--max-new-tokens", "4"]) == ["--eps=−2, 0", "--max-new-tokens", "4"]
    assert values_after_options(["--eps=-1", "-h"]) == ["--eps=-1", "-h"]
    assert values_after_options(["--eps", "-1e-3,0", "--", "-5"]) == ["--eps=-1e-3,0", "--", "-5"]
    code, out, _ = run("sweep", "--prompt", "the", "--switch", str(switch_file), "--eps", "-3,0", "--max-new-tokens", "2", "--json")
    assert code == 0 and [r["eps"] for r in json.loads(out)["rows"]] == [-3.0, 0.0]


def test_bad_decoding_values_are_refused_before_loading_naming_the_flags(capsys):
    """They were refused after the model loaded (7–12 s), naming the library's fields (max_new_tokens)."""
    for argv, said in ((["generate", "--prompt", "Hi", "--max-new-tokens", "0"], "--max-new-tokens must be an integer from 1"),
                       (["sweep", "--prompt", "Hi", "--switch", "sentiment", "--top-p", "2"], "--top-p must be a number from 0 to 1"),
                       (["generate", "--prompt", "Hi", "--temperature", "0", "--best-of", "2"], "--best-of > 1 needs sampling (--temperature > 0)"),
                       # the library's "or None" is no value a flag takes
                       (["generate", "--prompt", "Hi", "--switch", "sentiment", "--adaptive", "--kl-budget", "-1"], "--kl-budget must be a positive number of nats per token; got -1"),
                       (["generate", "--prompt", "Hi", "--switch", "sentiment", "--adaptive", "--generation-budget", "0"], "--generation-budget must be a positive number of nats per generation; got 0"),
                       # the library's "adaptive=True (--adaptive)" read as the flag alone
                       (["eval", "--switch", "sentiment", "--kl-budget", "1"], "--kl-budget caps adaptive strength's steering per token: give it with --adaptive, or leave it out"),
                       (["eval", "--switch", "sentiment", "--generation-budget", "6"], "--generation-budget caps adaptive strength's steering per generation: give 6 with --adaptive, or leave it out")):
        assert main(["--model", "no-such-model", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and said in err and "Cannot find model" not in err and "None" not in err, (argv, err)


def test_decoding_values_the_model_refuses_name_the_flags_too(run, switch_file):
    """Past the model's context length (known once it loads) the refusal named max_new_tokens, not the flag."""
    code, _, err = run("generate", "--prompt", "the", "--switch", f"{switch_file}=3", "--max-new-tokens", "1000000")
    assert code == 2 and "--max-new-tokens must be an integer from 1 to " in err and "max_new_tokens" not in err, err
    # the tiny model has no chat template: the refusal said "generate without chat=True", the library's argument
    code, _, err = run("generate", "--prompt", "the", "--chat", "--max-new-tokens", "2")
    assert code == 2 and "has no chat template; generate without --chat" in err and "=True" not in err, err
    code, _, err = run("eval", "--switch", str(switch_file), "--max-new-tokens", "1000000")
    assert code == 2 and "--max-new-tokens must be an integer from 1 to " in err and "max_new_tokens" not in err, err
