"""Files and folders written whole, with the permissions any new file or folder gets (lmswitch.io.atomic), and the
converted-model cache keyed so a changed GGUF file is converted again."""

from __future__ import annotations

import hashlib
import json
import os
import stat

import pytest

from lmswitch.core import models
from lmswitch.io.atomic import as_new_files, new_folder_beside, write_file


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o027])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def test_a_new_file_gets_the_umasks_mode_a_replaced_one_keeps_its_own(tmp_path, umask):
    target = write_file(tmp_path / "a.bin", lambda tmp: os.chmod(tmp, 0o600) or tmp.write_bytes(b"one"))  # a writer's 0600
    assert target.read_bytes() == b"one" and mode(target) == 0o666 & ~umask
    target.chmod(0o600)
    write_file(target, lambda tmp: tmp.write_bytes(b"two"))
    assert target.read_bytes() == b"two" and mode(target) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["a.bin"]


def test_a_failed_write_leaves_the_old_file_and_nothing_beside_it(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"kept")

    def fails(tmp):
        tmp.write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_file(tmp_path / "a.bin", fails)
    assert (tmp_path / "a.bin").read_bytes() == b"kept" and [p.name for p in tmp_path.iterdir()] == ["a.bin"]


def test_a_new_folders_files_get_the_umasks_modes_whatever_their_writer_gave_them(tmp_path, umask):
    folder = new_folder_beside(tmp_path / "export")
    (folder / "weights.safetensors").write_bytes(b"w")
    (folder / "weights.safetensors").chmod(0o600)  # as safetensors writes them
    as_new_files(folder)
    assert mode(folder) == 0o777 & ~umask and mode(folder / "weights.safetensors") == 0o666 & ~umask
    assert folder.parent == tmp_path and folder.name.startswith(".export.")


def test_a_gguf_file_changed_at_the_same_path_and_size_is_converted_again(tmp_path, monkeypatch):
    monkeypatch.setenv("LMSWITCH_CACHE", str(tmp_path / "cache"))
    converted = []

    def convert(gguf, target):
        converted.append(gguf.read_bytes())
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")

    monkeypatch.setattr(models, "_convert_gguf", convert)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"first")
    first = models._cached_gguf_folder(gguf, "m")
    assert models._cached_gguf_folder(gguf, "m") == first and converted == [b"first"]  # unchanged: the cache answers
    gguf.write_bytes(b"other")  # the same size, in place (a new export over an old one)
    os.utime(gguf, ns=(gguf.stat().st_atime_ns, gguf.stat().st_mtime_ns + 1_000_000))
    second = models._cached_gguf_folder(gguf, "m")
    assert second != first and converted == [b"first", b"other"]
    assert not first.exists()  # no file has the first bytes any more: its conversion went with the new one
    copy = tmp_path / "venv2" / "m.gguf"  # the same bytes elsewhere (the bundled model in another virtual environment)
    copy.parent.mkdir()
    copy.write_bytes(b"other")
    assert models._cached_gguf_folder(copy, "m") == second and converted == [b"first", b"other"]  # one conversion
    (tmp_path / "cache" / "models" / "digests.json").write_text("{damaged")
    assert models._cached_gguf_folder(copy, "m") == second  # the digest is read again


def test_a_new_conversion_removes_the_ones_no_file_has_any_more(tmp_path, monkeypatch):
    monkeypatch.setenv("LMSWITCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "_convert_gguf", lambda gguf, target: target.mkdir(parents=True) or (target / "config.json").write_text("{}"))
    cache = tmp_path / "cache" / "models"
    old_keyed = [cache / "m-0123456789", cache / "m-abcdefabcd"]  # keyed by path, as before 2026-11-29
    others = [cache / "mm-0123456789", cache / "m-my-notes", cache / "other-0123456789"]  # another model's, a user's folder
    for folder in old_keyed + others:
        folder.mkdir(parents=True)
    kept, gone = tmp_path / "a.gguf", tmp_path / "b.gguf"
    kept.write_bytes(b"kept")
    gone.write_bytes(b"gone")
    kept_folder, gone_folder = models._cached_gguf_folder(kept, "m"), models._cached_gguf_folder(gone, "m")
    assert kept_folder.exists() and gone_folder.exists() and not any(f.exists() for f in old_keyed)
    assert all(f.exists() for f in others)
    gone.unlink()
    new = tmp_path / "c.gguf"
    new.write_bytes(b"new")
    assert models._cached_gguf_folder(new, "m").exists() and kept_folder.exists() and not gone_folder.exists()
    assert all(f.exists() for f in others)
    assert sorted(json.loads((cache / "digests.json").read_text()).values()) == sorted(
        hashlib.sha256(b).hexdigest() for b in (b"kept", b"new"))
