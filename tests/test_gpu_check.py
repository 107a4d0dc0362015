"""The device check script (``benchmarks/gpu.py``) that runs on a GPU machine: here on the CPU, where every check passes, so
it does not rot between the rare runs on a GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_gpu_check_script_passes_every_check_on_the_cpu(tmp_path):
    out = tmp_path / "gpu.txt"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--device", "cpu", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = out.read_text().splitlines()
    results = [line.split()[0] for line in lines if line.split() and line.split()[0] in ("PASS", "FAIL", "SKIP")]
    assert len(results) == 20 and set(results) == {"PASS"}, "\n".join(lines)
