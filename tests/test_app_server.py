"""End to end: the real app (``python app.py``, embedded model, shipped switches) driven with ``gradio_client``."""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import openai
import pytest
import torch
from conftest import EXAMPLES, lines, wait_for
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

import lmswitch as ls
from lmswitch.core.switch import Switch
from lmswitch.harness.evaluate import sentiment_scores
from lmswitch.io.resources import data_path
from lmswitch.webapp.stopping import STOPPED_STARTING, STOPPING

pytestmark = [pytest.mark.real_model, pytest.mark.slow]  # a launched app.py on the embedded model

PROMPT = "My weekend was"
SLOTS = 12  # ε slider slots of the Steer view; the library's switches come first, sorted: detox, formality, sentiment


@pytest.fixture(autouse=True)
def _downloads_stay_in_tmp_path(tmp_path, monkeypatch):
    """gradio_client downloads a file through a new folder in the system's temporary folder and leaves that folder
    there, empty (``Client._download_file``): this process's temporary folder is the test's own."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def client(server) -> Client:
    return Client(server.url, verbose=False)


def steer_args(eps: dict[str, float], seed: int = 0, tokens: int = 24) -> list:
    order = ["detox", "formality", "sentiment"]
    return [PROMPT, tokens, 1.0, 0.9, seed, False, *[eps.get(n, 0.0) for n in order], *[0.0] * (SLOTS - len(order))]


def test_the_page_and_its_endpoints_take_the_servers_token_cap(app_server):
    """/generate, /steer, /sweep and /compose read the page's "max new tokens" slider, whose range Gradio enforces: it
    is this server's cap (README), not a smaller one of its own (it stopped at 200)."""
    import httpx

    from lmswitch.serve.limits import MAX_NEW_TOKENS

    config = httpx.get(f"{app_server.url}/config", timeout=30).json()
    sliders = [c["props"] for c in config["components"] if c["props"].get("label") == "max new tokens"]
    assert [(s["minimum"], s["maximum"]) for s in sliders] == [(1, MAX_NEW_TOKENS)]


def test_generate_with_and_without_a_switch(app_server):
    c = client(app_server)
    base, steered = [], []
    # sent at once, as a script may (gradio_client's submit): all finish (a dragged slider's newer request stops the older
    # one; these do not), batched together
    jobs = [[c.submit(prompt=PROMPT, switches=switches, max_new_tokens=30, seed=seed, api_name="/generate") for switches in ("", "sentiment=12")]
            for seed in range(4)]
    for off, on in ([job.result() for job in pair] for pair in jobs):
        assert off["steered"] == off["unsteered"] == on["unsteered"]  # ε = 0 is the base model; same seed, same unsteered text
        assert on["steered"] != on["unsteered"]
        # +12 is past the shipped card's fluent range: said, as the OpenAI API and the CLI say it; nothing said at ε 0
        assert on["beyond_fluent"]["sentiment"].startswith("ε +12 is beyond its fluent range") and "beyond_fluent" not in off
        assert on["scores"]["unsteered"]["perplexity"] > 1
        base.append(off["unsteered"])
        steered.append(on["steered"])
    assert sum(sentiment_scores(steered)) / 4 > sum(sentiment_scores(base)) / 4 + 0.3  # clearly more positive


def test_generate_best_of_returns_the_librarys_choice_for_both_outputs(app_server, lm32):
    """The app's "best of" control: both outputs are the likeliest of n candidates, as the library chooses them."""
    detox = ls.load_switch("detox", lm32)
    res = client(app_server).predict(prompt=PROMPT, switches="detox=4", max_new_tokens=12, seed=3, best_of=3, api_name="/generate")
    assert res["steered"] == ls.generate(lm32, PROMPT, [(detox, 4.0)], seed=3, max_new_tokens=12, best_of=3)[0]
    assert res["unsteered"] == ls.generate(lm32, PROMPT, seed=3, max_new_tokens=12, best_of=3)[0]
    for bad, match in ((99, "maximum value 16"), (2.5, "whole number")):
        with pytest.raises(AppError, match=match):
            client(app_server).predict(prompt=PROMPT, switches="detox=4", max_new_tokens=12, best_of=bad, api_name="/generate")


def test_generate_guided_returns_the_librarys_choice(app_server, lm32):
    """The app's "guided" control: the steered output is the library's guided decode, the unsteered one the plain
    decode (ε 0 has nothing to guide it)."""
    sentiment = ls.load_switch("sentiment", lm32)
    res = client(app_server).predict(prompt=PROMPT, switches="sentiment=4", max_new_tokens=12, seed=3, guide=3, api_name="/generate")
    assert res["steered"] == ls.generate(lm32, PROMPT, [(sentiment, 4.0)], seed=3, max_new_tokens=12, guide=3)[0]
    assert res["unsteered"] == ls.generate(lm32, PROMPT, seed=3, max_new_tokens=12)[0]
    with pytest.raises(AppError, match="maximum value 8"):
        client(app_server).predict(prompt=PROMPT, switches="sentiment=4", max_new_tokens=12, guide=9, api_name="/generate")


def test_generate_repeat_guard_off_is_the_papers_plain_steering(app_server, lm32):
    """The app's "repeat guard" checkbox: on (the default) is the library's default decoding, off is repeat_guard=0."""
    sentiment = ls.load_switch("sentiment", lm32)
    on = client(app_server).predict(prompt=PROMPT, switches="sentiment=8", max_new_tokens=16, seed=4, api_name="/generate")
    off = client(app_server).predict(prompt=PROMPT, switches="sentiment=8", max_new_tokens=16, seed=4, repeat_guard=False,
                                     api_name="/generate")
    assert on["steered"] == ls.generate(lm32, PROMPT, [(sentiment, 8.0)], seed=4, max_new_tokens=16)[0]
    assert off["steered"] == ls.generate(lm32, PROMPT, [(sentiment, 8.0)], seed=4, max_new_tokens=16, repeat_guard=0)[0]
    assert on["unsteered"] == off["unsteered"]  # ε 0: the guard has nothing to take back


def test_slider_endpoint_streams_and_scores(app_server, lm32):
    """The sliders' /steer streams the library's texts: the steered one at the slider's ε, the unsteered one at 0."""
    c = client(app_server)
    job = c.submit(*steer_args({"sentiment": -12, "detox": -2}), api_name="/steer")
    updates = list(job)
    assert len(updates) >= 5  # streamed token by token
    steered, unsteered, steered_scores, unsteered_scores, tokens = job.outputs()[-1]
    setting = [(ls.load_switch(name, lm32), eps) for name, eps in (("detox", -2.0), ("sentiment", -12.0))]
    sampling = {"seed": 0, "max_new_tokens": 24, "temperature": 1.0, "top_p": 0.9}
    assert steered == ls.generate(lm32, PROMPT, setting, **sampling)[0] != unsteered == ls.generate(lm32, PROMPT, **sampling)[0]
    assert "perplexity" in steered_scores and "perplexity" in unsteered_scores
    assert 'class="tok"' in tokens


def test_two_sessions_steering_at_once_do_not_affect_each_other(app_server):
    settings = {"a": {"sentiment": 12}, "b": {"sentiment": -12, "detox": -4}}
    alone = {k: client(app_server).submit(*steer_args(v, seed=5), api_name="/steer").result()[0] for k, v in settings.items()}
    together: dict[str, str] = {}
    barrier = threading.Barrier(2)

    def run(key: str) -> None:
        c = client(app_server)
        barrier.wait()
        together[key] = c.submit(*steer_args(settings[key], seed=5), api_name="/steer").result()[0]

    threads = [threading.Thread(target=run, args=(k,)) for k in settings]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone
    assert alone["a"] != alone["b"]


def test_train_from_a_short_document_then_steer_with_it_privately(app_server, tmp_path):
    doc = tmp_path / "praise.md"
    doc.write_text("\n\n".join(lines(EXAMPLES / "sentiment_positive.txt")[:20]), encoding="utf-8")
    c = client(app_server)
    out = c.predict(mode="one document", name="praise", text_a="", file_a=handle_file(str(doc)), file_b=None, steps=30, api_name="/train")
    status, _, report = out[:3]
    assert status == "Done." and "'praise'" in report and "is ready" in report and "held-out gain" in report
    learned = out[-1]  # what it learned: the words, the document's spans and the meter's reading of it
    assert "**Promotes** (toward *like the document*)" in learned and "**Telling passages** (they read most toward *like the document*" in learned and "The document measures ε" in learned
    res = c.predict(prompt=PROMPT, switches="praise=5", max_new_tokens=20, api_name="/generate")
    assert res["setting"] == {"praise": 5.0} and res["steered"] != res["unsteered"]
    before = len(app_server.log_path.read_text())
    with pytest.raises(AppError, match="no switch named 'praise'"):
        client(app_server).predict(prompt=PROMPT, switches="praise=5", api_name="/generate")
    app_server.log()  # flushed
    assert "Traceback" not in app_server.log_path.read_text()[before:]  # a refused input is the user's, not the server's, error


def test_a_page_saves_then_deletes_its_switch_and_cannot_delete_anothers(app_server):
    """Delete through the server: a saved switch is in every page's library until the page that saved it deletes it;
    then its file is in the library's .trash, and no page lists it. Another page's delete is refused."""
    mine, theirs = client(app_server), client(app_server)
    text = "\n".join(lines(EXAMPLES / "sentiment_positive.txt")[:12])
    out = mine.predict(mode="one document", name="tidy", text_a=text, file_a=None, file_b=None, steps=20, api_name="/train")
    assert out[0] == "Done."
    assert "Saved 'tidy'" in mine.predict("tidy", api_name="/save_switch")[0]
    assert "tidy" in theirs.predict(api_name="/status")["switches"]
    with pytest.raises(AppError, match="'tidy' was not saved from this page"):
        theirs.predict("tidy", api_name="/delete_switch")
    assert mine.predict("tidy", api_name="/delete_switch")[0].startswith("Deleted 'tidy' from the library")
    assert (app_server.switches / ".trash" / "tidy.safetensors").is_file() and not (app_server.switches / "tidy.safetensors").exists()
    assert "tidy" not in theirs.predict(api_name="/status")["switches"]
    with pytest.raises(AppError, match="no switch named 'tidy'"):
        theirs.predict(prompt=PROMPT, switches="tidy=3", api_name="/generate")


def test_highlight_lights_up_the_insult(app_server):
    c = client(app_server)
    text = "Thanks for the quick update on the schedule. Honestly, you are a pathetic idiot for booking the room twice."
    spans, heatmap, _, summary = c.predict(text=text, file=None, name="detox", eps=-4, max_span=5, n_spans=1, api_name="/highlight")
    lit = [piece["token"] for piece in spans if piece["class_or_confidence"]]
    assert lit and any(w in lit[0].lower() for w in ("idiot", "pathetic"))
    assert "Style meter" in summary


def test_bad_upload_is_refused_and_the_app_keeps_working(app_server, tmp_path):
    c = client(app_server)
    binary = tmp_path / "photo.txt"
    binary.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(AppError, match="binary"):
        c.predict(mode="one document", name="bad", text_a="", file_a=handle_file(str(binary)), file_b=None, steps=5, api_name="/train")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"{not a switch}")
    with pytest.raises(AppError, match="safetensors"):
        c.predict(handle_file(str(junk)), api_name="/import_switch")
    with pytest.raises(AppError, match="finite"):
        c.predict(prompt=PROMPT, switches="sentiment=nan", api_name="/generate")
    assert c.predict(prompt=PROMPT, switches="sentiment=3", max_new_tokens=5, api_name="/generate")["steered"]


def test_transfer_a_switch_to_gemma_then_steer_it(app_server):
    c = client(app_server)
    out = c.predict(name="sentiment", target="gemma3-270m", api_name="/transfer")
    report, model = out[0], out[1]
    assert "'sentiment-to-gemma3-270m' steers gemma3-270m" in report and "R²" in report and model["value"] == "gemma3-270m"
    # its strength probed on Gemma: the slider spans the fluent range, at a recommended ε inside it
    fluent = re.search(r"Fluent ε on gemma3-270m: ([-+][\d.]+) … ([-+][\d.]+)", report)
    recommended = float(re.search(r"its slider at ε ([-+][\d.]+)", report).group(1))
    assert fluent and 0 < recommended <= float(fluent.group(2)), report
    slider = next(u for u in out[3:] if isinstance(u, dict) and u.get("label", "").startswith("sentiment-to-gemma3-270m"))
    low, high = float(fluent.group(1)), float(fluent.group(2))  # the slider: whole ε inside it (Switch.slider_range)
    assert (slider["minimum"], slider["maximum"], slider["value"]) == (*Switch(torch.zeros(1, 1), card={"fluent_eps": [low, high]}).slider_range(), recommended)
    res = c.predict(prompt=PROMPT, switches="sentiment-to-gemma3-270m=2", max_new_tokens=15, api_name="/generate")
    assert res["steered"] != res["unsteered"]
    with pytest.raises(AppError, match="no switch named 'sentiment-to-gemma3-270m'"):
        client(app_server).predict(prompt=PROMPT, switches="sentiment-to-gemma3-270m=2", api_name="/generate")  # private to that session


def test_a_closed_clients_switch_goes_to_disk_and_a_stopped_server_removes_its_temporary_folders(tmp_path):
    """The real app: a client that imports a switch and closes has it moved to the server's temporary folder; SIGTERM
    (a service manager's stop) ends the server cleanly and removes its temporary folders, also when more SIGTERMs follow
    while it shuts down (stopping ``make app``'s process group sends two: make passes its own on). Gradio's copy of the
    upload goes to the server's own folder (not the shared /tmp/gradio) and is removed after ``--keep-files`` hours."""
    from app_server import AppServer

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    server = AppServer(tmp_path, name="closing", env={"TMPDIR": str(tmp), "LMSWITCH_SPOOL_DIR": str(tmp), "GRADIO_HEARTBEAT_INTERVAL": "0.2",
                                                      "GRADIO_TEMP_DIR": "", "LMSWITCH_KEEP_FILES": str(3 / 3600)})  # 3 s
    try:
        server.wait_ready()
        c = client(server)
        assert "Imported 'sentiment-2'" in c.predict(handle_file(str(server.switches / "sentiment.safetensors")), api_name="/import_switch")[0]
        copies = list(tmp.glob("lmswitch-gradio-*/**/sentiment.safetensors"))
        assert len(copies) == 1 and not (tmp / "gradio").exists(), sorted(map(str, tmp.rglob("*")))
        wait_for(lambda: not copies[0].exists(), "Gradio's copy of the upload to be removed after --keep-files", timeout=30)
        c.close()
        try:
            wait_for(lambda: list(tmp.glob("lmswitch-closed-sessions-*/*.safetensors")), "the closed client's switch on disk")
        except AssertionError as err:
            raise AssertionError(f"{err}; the server said:\n{server.log()}") from None
        deadline = time.monotonic() + 10  # SIGTERM again every 5 ms until it has gone: only the first may act
        while server.process.poll() is None and time.monotonic() < deadline:
            os.kill(server.process.pid, signal.SIGTERM)
            time.sleep(0.005)
    finally:
        server.stop()
    log = server.log_path.read_text()
    assert server.process.returncode == 0 and "Traceback" not in log, log[-4000:]
    assert list(tmp.glob("lmswitch-*")) == [] and not (tmp / "gradio").exists()


def test_a_stopped_server_removes_its_pages_files_from_a_folder_the_user_named(tmp_path):
    """With ``GRADIO_TEMP_DIR`` naming a folder (perhaps shared with other apps), a stopped server leaves the folder and
    what others put there, but not the files its pages uploaded, nor its download files; and it stops at once, though a
    client is open and training, an API client is streaming a long completion, and an MCP client's training waits."""
    from app_server import AppServer

    server = AppServer(tmp_path, name="named-folder")  # GRADIO_TEMP_DIR: tmp_path / "gradio"
    folder = tmp_path / "gradio"
    stopping = math.inf
    try:
        server.wait_ready()
        c = client(server)
        assert "Imported" in c.predict(handle_file(str(server.switches / "sentiment.safetensors")), api_name="/import_switch")[0]
        copies = list(folder.rglob("sentiment.safetensors"))
        assert len(copies) == 1 and list(folder.glob("lmswitch-export-*"))
        others = folder / "another-app.txt"
        others.write_text("not ours")
        # a training under way: it would be lost with the process, and the stop waited for it until Gradio gave up
        article = data_path("stance", "night_trains", "article_a.txt").read_text(encoding="utf-8")
        job = c.submit(mode="one document", name="long", text_a=article, file_a=None, file_b=None, steps=5000, api_name="/train")
        wait_for(lambda: any(str(out[0]).startswith("Training…") for out in job.outputs()), "the training to run")
        # and an API client streaming a long completion (about a minute of decoding)
        api = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=60)
        pieces: list[str] = []
        ended: list[BaseException | None] = []

        def stream() -> None:
            try:
                for chunk in api.completions.create(model="smollm2-135m", prompt=PROMPT, max_tokens=1024, stream=True):
                    pieces.append(chunk.choices[0].text if chunk.choices else "")
                ended.append(None)
            except Exception as err:  # noqa: BLE001 (what the client saw is asserted below)
                ended.append(err)

        streaming = threading.Thread(target=stream)
        streaming.start()
        wait_for(lambda: len(pieces) > 2, "the completion to stream")
        # and a training over MCP, queued behind the page's on the compute thread: it ran on, and the stop waited 5 s for it
        tool: list = []
        mcp_training = threading.Thread(target=_train_over_mcp, args=(server, article, tool), daemon=True)
        mcp_training.start()
        wait_for(lambda: tool == ["sent"], "the MCP call to be sent")
        time.sleep(1)  # (received)
        stopping = time.monotonic()
    finally:
        server.stop()  # SIGTERM, with the client still open, its training running and a completion streaming
    took = time.monotonic() - stopping
    streaming.join(30)
    mcp_training.join(30)
    assert server.process.returncode == 0 and "Traceback" not in server.log_path.read_text(), server.log()
    # its heartbeat stream and its training end with the stop: a graceful close waited for each until Gradio gave up, 5 s later
    assert took < 4, f"the stop took {took:.1f} s with a client open, training and streaming:\n{server.log()}"
    # the completion cut short says why (it ended like a finished text, without a word of the stop)
    assert ended and isinstance(ended[0], openai.APIError) and "the server is stopping" in str(ended[0]), ended
    assert len(tool) == 2 and ("the server is stopping" in tool[1] or "ConnectError" in tool[1]), tool
    assert '"name"' not in tool[1], tool  # not a switch answered as trained (with its probe's failure in its card)
    assert folder.is_dir() and others.exists() and not copies[0].exists() and not list(folder.glob("lmswitch-export-*"))


def _train_over_mcp(server, text: str, out: list) -> None:
    """Call the MCP tool ``train_from_text`` on ``text``; ``out`` gets "sent", then the tool's answer or the error."""
    import asyncio

    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async def run():
        async with streamablehttp_client(f"{server.url}/gradio_api/mcp/") as (read, write, _), ClientSession(read, write) as session:
            await session.initialize()
            call = asyncio.create_task(session.call_tool("train_from_text", {"name": "mcp-long", "positive": text,
                                                                             "mode": "one document", "steps": 5000}))
            out.append("sent")
            result = await call
            return result.content[0].text

    try:
        out.append(asyncio.run(run()))
    except BaseException as err:  # noqa: BLE001 (what the client saw is asserted)
        out.append(repr(err))


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


STARTING, SERVING = "in the background; open", "OpenAI-compatible API at"  # what the app prints as it starts, then serves
STOPS = {"SIGTERM-serving": (signal.SIGTERM, SERVING), "SIGHUP-serving": (signal.SIGHUP, SERVING), "SIGTERM-starting": (signal.SIGTERM, STARTING)}


class MakeApp:
    """README's first command, ``make app``, started as from a terminal, to be sent ``stop`` once it has printed ``when``."""

    def __init__(self, folder: Path, stop: signal.Signals, when: str) -> None:
        from app_server import ROOT, free_port

        self.stop, self.when, self.stopped = stop, when, False
        switches, self.tmp, self.log = folder / "switches", folder / "tmp", folder / "make-app.log"
        switches.mkdir()
        self.tmp.mkdir()
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}  # not make test's flags
        env |= {"PYTHONUNBUFFERED": "1", "LMSWITCH_SPOOL_DIR": str(self.tmp), "TMPDIR": str(self.tmp)}
        with open(self.log, "w") as out:  # -o: never (re)install here, whatever the install stamp's age (make test installs first)
            # as from a terminal: the stop signals at their defaults (env resets them), even where this test runs under nohup
            # (SIGHUP ignored, which make and the app would inherit and keep, as they should)
            self.make = subprocess.Popen(["env", "--default-signal=HUP,INT,TERM", "make", "-o", ".venv/.installed", "app",
                                          f"ARGS=--port {free_port()} --switches {switches}"],
                                         cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def ended(self) -> bool:
        """Send the stop once ``when`` is printed; then True once every process of make app's group has ended."""
        if not self.stopped:
            assert self.make.poll() is None, f"make app exited with {self.make.returncode} before its stop:\n{self.log.read_text()[-4000:]}"
            if self.when in self.log.read_text():
                os.killpg(self.make.pid, self.stop)
                self.stopped = True
            return False
        return self.make.poll() is not None and not group_alive(self.make.pid)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.make.pid, signal.SIGKILL)

    def state(self) -> str:
        return (f"{'stopped' if self.stopped else 'not stopped yet'}, make {'running' if self.make.poll() is None else 'ended'}; "
                f"its output ends:\n{self.log.read_text()[-1500:]}")


@pytest.fixture(scope="module")
def stopped_make_apps(request, tmp_path_factory) -> dict[str, MakeApp]:
    """Each way of stopping ``make app`` the run selected, all at once: their starts (imports, the model's load) overlap
    on the cores."""
    names = {item.callspec.params["name"] for item in request.session.items if item.originalname == "test_stopping_make_apps_process_group_ends_the_app_cleanly"}
    apps = {name: MakeApp(tmp_path_factory.mktemp(name), *how) for name, how in STOPS.items() if name in names}
    try:
        wait_for(lambda: all([app.ended() for app in apps.values()]), "each make app to print its line, then end when stopped", timeout=180)
    except AssertionError as err:
        raise AssertionError(f"{err}:\n" + "\n".join(f"{name}: {app.state()}" for name, app in apps.items())) from None
    finally:
        for app in apps.values():
            app.kill()
    return apps


@pytest.mark.slow
@pytest.mark.parametrize("name", STOPS)
def test_stopping_make_apps_process_group_ends_the_app_cleanly(stopped_make_apps, name):
    """README's first command, stopped as a service manager (SIGTERM) or a closed terminal (SIGHUP) stops it: the signal
    goes to its process group, and with SIGTERM make passes its own on, so the app gets two a moment apart. Serving or
    still starting (its model loading), it must close once, remove its temporary folders and print no traceback (a
    lock in the signal handler once deadlocked it, and a stop while the model loaded aborted it)."""
    app = stopped_make_apps[name]
    text = app.log.read_text()
    closed = [STOPPING] + ([STOPPED_STARTING] if app.when == STARTING else [])
    assert any(c in text for c in closed) and "Traceback" not in text and "make: ***" not in text, text[-4000:]
    assert list(app.tmp.glob("lmswitch-*")) == []


def test_sweep_and_composition_map_endpoints_answer_the_librarys_texts(app_server, lm32):
    """/sweep and /compose on the launched app: each row is the library's text at its ε (both switches in a map cell)."""
    sentiment, detox = (ls.load_switch(n, lm32) for n in ("sentiment", "detox"))
    sampling = {"max_new_tokens": 8, "temperature": 1.0, "top_p": 0.9, "seed": 2}
    widgets = [*sampling.values(), False, False, 1, 1, True]  # chat, adaptive, best of, guided, repeat guard
    c = client(app_server)
    _, table = c.predict("sentiment", "-4, 4", 1, PROMPT, *widgets, api_name="/sweep")
    assert [(r[0], r[2]) for r in table["data"]] == [(e, ls.generate(lm32, PROMPT, [(sentiment, e)], **sampling)[0]) for e in (-4.0, 4.0)]
    _, table = c.predict("sentiment", "detox", "-4, 4", "2", 1, PROMPT, *widgets, api_name="/compose")
    assert [(r[0], r[1]) for r in table["data"]] == [(-4.0, 2.0), (4.0, 2.0)]
    assert [r[3] for r in table["data"]] == [ls.generate(lm32, PROMPT, [(sentiment, a), (detox, 2.0)], **sampling)[0] for a in (-4.0, 4.0)]
