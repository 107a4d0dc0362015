"""lmswitch web app: drag ε sliders, train switches from text, look inside them, highlight styled spans.

A thin Gradio adapter over the ``lmswitch`` library. The views live in
``lmswitch/webapp`` (handlers per tab, then the ``gr.Blocks`` layout); this file
reads the command line, starts the backend and launches the server.

    python app.py [--host 127.0.0.1] [--port 7860] [--model smollm2-135m] [--switches DIR] [--api-key KEY] [--mcp] [--share]

The same server answers OpenAI-compatible requests under ``/v1`` (``lmswitch/webapp/openai_api.py``).
"""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import shutil
import sys
import tempfile
import threading
import traceback
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # offline: no telemetry calls
# Gradio's queue recomputes its monitoring summary (a pandas table over the last 10,000 events) after every event by
# default: 2–7 ms of CPU per request on 2 cores, on the cores the model decodes on. Every 100 events is enough.
os.environ.setdefault("GRADIO_ANALYTICS_CACHE_FREQUENCY", "100")
# Gradio keeps a copy of every file a page uploads or is served under GRADIO_TEMP_DIR, by default /tmp/gradio, which every
# Gradio app shares and nothing empties. Unless a user names a folder, this server's copies go to a folder of its own,
# removed at exit (set before Gradio is imported: some of its modules read the folder then); while it runs, old copies
# go (--keep-files, lmswitch/webapp/files.py).
if not os.environ.get("GRADIO_TEMP_DIR"):
    os.environ["GRADIO_TEMP_DIR"] = tempfile.mkdtemp(prefix="lmswitch-gradio-")
    atexit.register(shutil.rmtree, os.environ["GRADIO_TEMP_DIR"], ignore_errors=True)

from lmswitch.core.models import DEFAULT_MODEL  # noqa: E402
from lmswitch.webapp.backend import DEFAULT_SWITCHES, Backend  # noqa: E402
from lmswitch.webapp.files import KEEP_FILES_HOURS, keep_seconds, start_sweeping  # noqa: E402
from lmswitch.webapp.layout import CSS_PATH, HEAD_PATH, build_app  # noqa: E402
from lmswitch.webapp.lens import inspect_switch, run_highlight  # noqa: E402
from lmswitch.webapp.mcp_tools import McpTools  # noqa: E402
from lmswitch.webapp.openai_api import OpenAIApi  # noqa: E402
from lmswitch.webapp.steer import generate_api, on_load, run_grid, run_sweep, run_transfer, select_model, steer  # noqa: E402
from lmswitch.webapp.stopping import quiet, serve_until_stopped, stop_on_signals, stopped_while_starting  # noqa: E402
from lmswitch.webapp.train import MODES, cancel_training, delete_switch, import_switch, save_switch, train  # noqa: E402
from lmswitch.webapp.widgets import MAX_SLOTS, PENDING, dropdown_updates, slot_updates  # noqa: E402

__all__ = [  # the handlers, for scripts and tests that call them without a server
    "MAX_SLOTS", "MODES", "PENDING", "Backend", "McpTools", "OpenAIApi", "build_app", "cancel_training", "delete_switch", "dropdown_updates", "generate_api", "import_switch",
    "freeze_when_loaded", "inspect_switch", "main", "on_load", "run_grid", "run_highlight", "run_sweep", "run_transfer", "save_switch", "select_model",
    "slot_updates", "steer", "train",
]


def freeze_when_loaded(backend: Backend) -> None:
    """Once the model is loaded, move what the server holds for good (the model, its switches, the modules of Gradio and
    transformers: ~500k objects) out of Python's cyclic garbage collector. A full collection scanned them all and
    paused every user for 0.25–0.27 s (about one every three minutes under load, measured); afterwards it scans only
    what came later. What is garbage at that moment is collected first."""
    backend.ready.wait()
    gc.collect()
    gc.freeze()


def hours(text: str) -> float:
    """``--keep-files``' value (argparse also applies it to the environment's): a positive number of hours."""
    try:
        value = float(text)
        keep_seconds(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number of hours (e.g. 24 or 0.5); got {text!r} (--keep-files or LMSWITCH_KEEP_FILES)") from None
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(description="lmswitch web app (Gradio)")
    p.add_argument("--host", default=env("LMSWITCH_HOST", "127.0.0.1"), help="interface to listen on (env LMSWITCH_HOST; default 127.0.0.1)")
    p.add_argument("--port", type=int, default=int(env("LMSWITCH_PORT", "7860")), help="port (env LMSWITCH_PORT; default 7860)")
    p.add_argument("--model", default=env("LMSWITCH_MODEL", DEFAULT_MODEL), help="model alias, folder, .gguf or cached hub id (env LMSWITCH_MODEL)")
    p.add_argument("--dtype", default=env("LMSWITCH_DTYPE", "auto"), choices=["auto", "float32", "bfloat16", "float16"],
                   help="model weights dtype (env LMSWITCH_DTYPE; auto: bfloat16 where the hardware is fast at it)")
    p.add_argument("--switches", default=env("LMSWITCH_SWITCHES", str(DEFAULT_SWITCHES)),
                   help="switch library folder: loaded at start, 'Save to library' writes here (env LMSWITCH_SWITCHES; "
                        "default: the shipped switches)")
    p.add_argument("--api-key", default=env("LMSWITCH_API_KEY"),
                   help="require this key ('Authorization: Bearer KEY') on the OpenAI-compatible /v1 endpoints (env LMSWITCH_API_KEY; "
                        "default: none)")
    p.add_argument("--mcp", action="store_true", default=env("LMSWITCH_MCP", "") not in ("", "0"),
                   help="also serve MCP tools (list_switches, steer_text, train_from_text, highlight_text, measure_style) at "
                        "/gradio_api/mcp/ (env LMSWITCH_MCP=1)")
    p.add_argument("--spool-dir", default=env("LMSWITCH_SPOOL_DIR"),
                   help="where a closed page's unsaved switches wait on disk, in a temporary folder removed at exit (env "
                        "LMSWITCH_SPOOL_DIR; default /var/tmp, which is on disk where /tmp may be memory)")
    p.add_argument("--keep-files", type=hours, default=env("LMSWITCH_KEEP_FILES") or f"{KEEP_FILES_HOURS:g}", metavar="HOURS",
                   help="remove the files pages uploaded (documents, switches) or downloaded after this many hours (env "
                        f"LMSWITCH_KEEP_FILES; default {KEEP_FILES_HOURS:g}); all of them go when the server stops")
    p.add_argument("--share", action="store_true", help="create a public Gradio share link (off by default)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.switches and not Path(args.switches).is_dir():
        raise SystemExit(f"switch folder {args.switches} does not exist; create it or pass --switches DIR")
    if args.spool_dir and not (Path(args.spool_dir).is_dir() and os.access(args.spool_dir, os.W_OK | os.X_OK)):
        raise SystemExit(f"--spool-dir {args.spool_dir} is not a folder this user can write to; create it or pass another")
    stop_on_signals()
    try:
        demo, backend = serve(args)
        serving = f"lmswitch: OpenAI-compatible API at http://{args.host}:{args.port}/v1" + (" (API key required)" if args.api_key else "")
        serve_until_stopped(demo, serving, on_stop=backend.stopping.set)  # from here on a stop closes the server, then this returns
    except KeyboardInterrupt:
        stopped_while_starting()
    except Exception:  # e.g. the port is taken: said, and the model that may be loading does not abort the exit
        traceback.print_exc()
        return 1
    return 0


def end_process(code: int) -> None:
    """Run the exit handlers (a save in progress ends, the temporary folders go), then end without finalising the
    interpreter: a model still loading, or a switch still training, on a daemon thread made that abort the process
    ("terminate called without an active exception", SIGABRT) when it was stopped early. Non-daemon threads are not
    waited for (Python would join them before these handlers); the server is closed by then."""
    quiet()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except OSError:  # a closed terminal
            pass
    os._exit(code)


def serve(args: argparse.Namespace):
    """Start the web server, then the backend (the model loads in the background); returns the running Gradio app and
    its backend."""
    backend = Backend(args.model, args.switches, dtype=args.dtype, spool=args.spool_dir)
    backend.compute.own_cores()  # a torch op on a web thread must not slow every generation (serve/compute.py)
    demo = build_app(backend)
    if args.mcp:
        McpTools(backend).register(demo)
    demo.queue(default_concurrency_limit=2)
    print(f"lmswitch: loading {args.model} in the background; open http://{args.host}:{args.port}", flush=True)
    demo.launch(server_name=args.host, server_port=args.port, share=args.share, show_error=True, ssr_mode=False, css_paths=[CSS_PATH],
                head_paths=[HEAD_PATH],
                footer_links=["api"], max_file_size="256mb",  # documents are refused above 20 MB; switches of big models are larger
                prevent_thread_lock=True, mcp_server=args.mcp)
    demo.app.include_router(OpenAIApi(backend, args.api_key).router())
    # only now, with the server up: launch asks it for its own page once (3 s at most) and gives up without it ("When
    # localhost is not accessible…"), which a model loading on the same 2 cores made it do on a fresh clone's first start
    backend.start()
    start_sweeping(demo, args.keep_files)
    threading.Thread(target=freeze_when_loaded, args=(backend,), name="lmswitch-gc-freeze", daemon=True).start()
    return demo, backend


if __name__ == "__main__":
    end_process(main())
