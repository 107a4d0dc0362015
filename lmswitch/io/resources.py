"""The data that ships inside the package, found through ``importlib.resources``.

Everything here works the same from a checkout and from an installed wheel:
evaluation prompts, example sentences, the style datasets, the neutral reference
text and the shipped switches (resolvable by name, e.g. ``sentiment``).

>>> shipped_switch_path("sentiment").name          # doctest: +SKIP
'sentiment.safetensors'
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_DATA = "data"


def data_path(*parts: str) -> Path:
    """A path inside ``lmswitch/data`` (a real folder: the package is installed unzipped)."""
    return Path(str(resources.files("lmswitch").joinpath(_DATA, *parts)))


def read_data_text(*parts: str) -> str:
    return resources.files("lmswitch").joinpath(_DATA, *parts).read_text(encoding="utf-8")


def prompts_dir() -> Path:
    """Evaluation prompt sets (``neutral.txt``, ``provocative.txt``)."""
    return data_path("prompts")


def examples_dir() -> Path:
    """Project-written example sentences (sentiment, civil/toxic comments, highlight examples)."""
    return data_path("examples")


def styles_dir() -> Path:
    """The style datasets the shipped switches are built from (provenance in ``DATA.md``)."""
    return data_path("styles")


def shipped_switches_dir() -> Path:
    """The folder of shipped switches: the app's default library and ``build-pretrained``'s default output."""
    return data_path("switches")


def shipped_switch_names() -> list[str]:
    return sorted(p.stem for p in shipped_switches_dir().glob("*.safetensors"))


def shipped_switch_path(name: str) -> Path | None:
    """The file of shipped switch ``name`` (e.g. ``"sentiment"``), or None when there is no such switch."""
    path = shipped_switches_dir() / f"{name}.safetensors"
    return path if "/" not in name and "\\" not in name and path.is_file() else None


def resolve_switch_file(ref: str | Path) -> Path:
    """A switch file from a path, or from the name of a shipped switch (``"sentiment"``).

    An existing file wins over a shipped name; anything else is a ``FileNotFoundError``
    that lists the shipped names.
    """
    path = Path(ref).expanduser()
    if path.is_file():
        return path
    shipped = shipped_switch_path(str(ref)) if str(ref).strip() else None
    if shipped is not None:  # (a shipped name wins over a folder of that name)
        return shipped
    if str(ref).strip() and path.is_dir():  # ("" is the current folder, and no name)
        raise FileNotFoundError(f"{path} is a folder; give a switch file in it (a .safetensors file) or a shipped switch's name")
    several = "; give several switches one by one (on the command line: --switch sentiment=2 --switch formality=1)" if "," in str(ref) else ""
    names = ", ".join(shipped_switch_names())
    if path.suffix == ".safetensors" or len(path.parts) > 1:  # meant as a file: said so first, not as a switch name
        folder = path.absolute().parent
        where = f"{folder} holds no {path.name}" if folder.is_dir() else f"there is no folder {folder}"
        raise FileNotFoundError(f"no such file: '{ref}' (check the path; {where}); or give a shipped switch's name, one of: "
                                f"{names}")
    raise FileNotFoundError(f"no switch file '{ref}' and no shipped switch of that name; give a .safetensors path or one of: "
                            f"{names}{several}")
