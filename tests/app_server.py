"""Launch the real web app (``python app.py``) on a free port, for the end-to-end and browser tests."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from lmswitch.io.resources import shipped_switches_dir

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "artifacts"  # git-ignored: server logs, screenshots


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AppServer:
    """A running ``app.py --mcp`` (or another ``script`` taking its arguments) with its own copy of the shipped switches
    (so saving never touches the repo)."""

    def __init__(self, workdir: Path, name: str = "app", api_key: str | None = None, args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, script: Path = ROOT / "app.py") -> None:
        self.api_key = api_key  # required on the OpenAI-compatible /v1 endpoints when set
        self.switches = workdir / "switches"
        shutil.copytree(shipped_switches_dir(), self.switches, ignore=shutil.ignore_patterns("*.md"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.log_path = ARTIFACTS / f"{name}-server.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 (closed in stop)
        # Gradio keeps a copy of every file the app receives or serves, and leaves them: in the test's folder, not /tmp/gradio
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "GRADIO_TEMP_DIR": str(workdir / "gradio"), **(env or {})}
        env.pop("LMSWITCH_API_KEY", None)
        env["LMSWITCH_MCP"] = "1"  # the MCP tools too (tests/test_mcp.py)
        if api_key:
            env["LMSWITCH_API_KEY"] = api_key
        self.process = subprocess.Popen(
            [sys.executable, str(script), "--port", str(self.port), "--switches", str(self.switches), *args],
            cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT, env=env,
        )

    def wait_ready(self, timeout: float = 600) -> dict:
        """Poll the ``/status`` endpoint until the model is loaded; fail with the server log otherwise."""
        import httpx
        from gradio_client import Client

        deadline = time.monotonic() + timeout
        client = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"app.py exited with {self.process.returncode}:\n{self.log()}")
            try:
                client = client or Client(self.url, verbose=False, download_files=False)  # (its default folder: /tmp/gradio)
                status = client.predict(api_name="/status")
                if status["error"]:
                    raise RuntimeError(f"the app could not load its model: {status['error']}")
                if status["ready"]:
                    return status
            except (OSError, httpx.HTTPError):  # not listening yet
                pass
            time.sleep(0.5)
        raise TimeoutError(f"app.py was not ready after {timeout:.0f} s:\n{self.log()}")

    def log(self) -> str:
        if not self._log.closed:  # (closed once the server has stopped)
            self._log.flush()
        return self.log_path.read_text()[-4000:]

    def rss_bytes(self) -> int:
        import psutil

        return psutil.Process(self.process.pid).memory_info().rss

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
