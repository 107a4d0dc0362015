"""What a closed session costs the server (issue 17): clients that each train a switch and close.

    python benchmarks/session_memory.py [--sessions 20] [--root CHECKOUT]

Starts ``app.py`` (bfloat16) on a free port, warms it up with 3 trainings, then lets ``--sessions`` clients each
train a switch from 30 + 30 sentences (``/train``) and close, one after the other, and prints the server's resident
memory growth in all and per session. ``--root`` runs another checkout's app (e.g. a worktree of an older commit) to
compare the two one after the other.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path


def measure(root: Path, sessions: int) -> str:
    sys.path[:0] = [str(root / "tests"), str(root)]
    from app_server import AppServer  # the tests' launcher of that checkout: its app.py on a free port
    from gradio_client import Client

    examples = root / "lmswitch" / "data" / "examples"
    pos, neg = ("\n".join((examples / f"sentiment_{side}.txt").read_text().splitlines()[:30]) for side in ("positive", "negative"))
    workdir = Path(tempfile.mkdtemp())  # the server's copy of the shipped switches
    server = AppServer(workdir, name="session-memory", args=("--dtype", "bfloat16"),
                       env={"GRADIO_HEARTBEAT_INTERVAL": "0.5"})  # a closed client is noticed within half a second

    def train_and_close() -> None:
        client = Client(server.url, verbose=False, ssl_verify=False)
        try:
            client.predict(mode="labelled sentences", name="mood", text_a=pos, text_b=neg, file_a=None, file_b=None, api_name="/train")
        finally:
            client.close()

    try:
        server.wait_ready()
        for _ in range(3):  # warm-up: the allocator's pools, the caches
            train_and_close()
        time.sleep(3)
        before = server.rss_bytes()
        for _ in range(sessions):
            train_and_close()
        time.sleep(3)  # the last close is noticed and handled
        grown = (server.rss_bytes() - before) / 2**20
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return f"{root}: {sessions} closed training sessions: {grown:+.1f} MB, {grown / sessions:+.2f} MB per session"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1], help="the checkout whose app runs")
    args = p.parse_args()
    if args.sessions < 1:
        p.error("--sessions must be at least 1")
    print(measure(args.root.resolve(), args.sessions), flush=True)


if __name__ == "__main__":
    main()
