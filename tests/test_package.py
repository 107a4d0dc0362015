"""lmswitch as an installable package: the wheel holds the code, the package data and the `lmswitch` command.

Builds the wheel from a copy of the checkout, installs it into a fresh virtual environment and runs the
installed command from an unrelated folder, so that nothing can come from the checkout itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DATA_FILES = [
    "lmswitch/data/prompts/neutral.txt",
    "lmswitch/data/reference.txt",
    "lmswitch/data/switches/sentiment.safetensors",
    "lmswitch/data/examples/highlight.json",
    "lmswitch/data/styles/DATA.md",
]


def _setuptools_builds_wheels() -> bool:
    """setuptools >= 70.1 builds wheels without the `wheel` package (torch requires setuptools >= 77 anyway)."""
    try:
        major, minor = (int(part) for part in version("setuptools").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (70, 1)


def _run(cmd: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the sources (an in-tree build would leave build/ and a stale
    build/lib in the checkout, shared with whoever else builds there)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "lmswitch", src / "lmswitch", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # Without isolation the build uses this environment's setuptools and works offline; an isolated build
    # (the fallback) fetches the backend declared in pyproject.toml from the package index.
    isolation = ["--no-build-isolation"] if _setuptools_builds_wheels() else []
    out = tmp / "dist"
    _run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", *isolation, "-w", out], cwd=src)
    (built,) = out.glob("lmswitch-*.whl")
    return built


def test_wheel_holds_code_data_and_the_command(wheel):
    import lmswitch

    assert wheel.name == f"lmswitch-{lmswitch.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = zf.read(f"lmswitch-{lmswitch.__version__}.dist-info/entry_points.txt").decode()
    for path in DATA_FILES:
        assert path in names, f"{path} is not in the wheel"
    for module in ("lmswitch/__init__.py", "lmswitch/__main__.py", "lmswitch/io/resources.py", "lmswitch/core/switch.py"):
        assert module in names
    assert any(n == "lmswitch/cli.py" or n == "lmswitch/cli/__init__.py" for n in names)
    # every shipped data file is in, and nothing from the checkout's tests or caches
    data = ROOT / "lmswitch" / "data"
    shipped = {f"lmswitch/data/{p.relative_to(data).as_posix()}" for p in data.rglob("*") if p.is_file()}
    assert shipped <= names, f"missing from the wheel: {sorted(shipped - names)}"
    assert not any(n.startswith("tests/") or "__pycache__" in n for n in names)
    assert "lmswitch = lmswitch.cli:main" in entry_points


def test_installed_command_runs_from_the_installed_package(wheel, tmp_path):
    fresh = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", fresh], cwd=tmp_path)
    python = fresh / "bin" / "python"
    # this environment's pip installs into the fresh one (saves bootstrapping pip there)
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", wheel], cwd=tmp_path)

    # The dependencies (torch, transformers & co.) come from this environment through a .pth file:
    # installing them again would take minutes and gigabytes, and what is under test is the wheel's own
    # contents and entry point. Lines of a .pth are appended to sys.path after the fresh site-packages,
    # so the installed lmswitch is found first even if this environment has one too.
    fresh_site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path).stdout.strip())
    ours = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (fresh_site / "lmswitch-test-deps.pth").write_text("".join(f"{p}\n" for p in ours), encoding="utf-8")

    # from a folder that is neither the checkout nor the environment, with no PYTHONPATH
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    probe = (
        "import json, lmswitch; from importlib.metadata import version; from lmswitch.io import resources as r;"
        "print(json.dumps({'file': lmswitch.__file__, 'version': lmswitch.__version__, 'dist': version('lmswitch'),"
        " 'switch': str(r.resolve_switch_file('sentiment')), 'names': r.shipped_switch_names()}))"
    )
    found = json.loads(_run([python, "-c", probe], cwd=workdir).stdout)
    fresh_root = fresh.resolve()
    assert Path(found["file"]).resolve().is_relative_to(fresh_root), found["file"]
    assert Path(found["switch"]).resolve().is_relative_to(fresh_root), found["switch"]
    assert found["version"] == found["dist"]
    assert {"sentiment", "detox", "formality"} <= set(found["names"])

    command = fresh / "bin" / "lmswitch"
    helped = _run([command, "--help"], cwd=workdir)
    assert "info" in helped.stdout and "generate" in helped.stdout

    info = json.loads(_run([command, "info", "--switch", "sentiment", "--json"], cwd=workdir).stdout)
    assert info["name"] == "sentiment"
    assert info["dim"] > 0
    path = Path(str(info.get("path", "")))
    if path.is_absolute():
        assert path.resolve().is_relative_to(fresh_root), path


def test_the_package_exports_load_on_first_use():
    """``import lmswitch`` is light (no torch); each name of ``__all__`` comes from the module ``_EXPORTS`` names, the
    same one its ``TYPE_CHECKING`` import (what IDEs read) names; an unknown name is an AttributeError."""
    import ast
    import importlib

    import lmswitch

    script = "import sys, lmswitch; print('torch' in sys.modules, 'transformers' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.stdout.split() == ["False", "False"], done.stderr
    for name, module in lmswitch._EXPORTS.items():
        assert getattr(lmswitch, name) is getattr(importlib.import_module(module), name)
    assert set(lmswitch.__all__) == set(lmswitch._EXPORTS) and set(lmswitch.__all__) <= set(dir(lmswitch))
    tree = ast.parse(Path(lmswitch.__file__).read_text(encoding="utf-8"))
    checking = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    assert {a.name: imp.module for imp in checking.body for a in imp.names} == lmswitch._EXPORTS
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        lmswitch.nope  # noqa: B018
