"""Files and folders written whole: into a temporary beside the target, then renamed into place, so a failure leaves
nothing behind, with the permissions any new file or folder gets (0666 or 0777 less the umask).

``tempfile`` makes 0600 files and 0700 folders, and safetensors writes its files 0600 (safetensors issue 782): a switch,
an export or a converted model written that way cannot be read by another user, or by a server running as one (vLLM
loading an exported adapter, a container).

>>> write_file(Path("s.safetensors"), lambda tmp: save_file(tensors, tmp))   # doctest: +SKIP
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from safetensors import SafetensorError


def writable(path: str | os.PathLike, *, folder: bool = False) -> Path:
    """``path`` with ``~`` expanded, once it can be written: a file (or with ``folder``, a folder to write into), not
    the other kind where something is there already, in a folder that exists or can be made, with permission to write.
    Checked before any work, so an hour's run is not lost to a typo in where it goes."""
    p = Path(path).expanduser()
    if p.is_dir() and not folder:
        raise ValueError(f"{p} is a folder; give a file name")
    if p.exists() and not p.is_dir() and folder:
        raise ValueError(f"{p} is a file; give a folder to write into")
    nearest = next(a for a in (p if folder else p.parent, *p.parents) if a.exists())
    if not nearest.is_dir():
        raise ValueError(f"cannot write {p}: {nearest} is a file, not a folder")
    try:  # a file made and removed there: permission bits say yes to root on a read-only or special file system
        fd, probe = tempfile.mkstemp(prefix=".lmswitch-probe-", dir=nearest)
    except OSError as err:
        why = "" if err.errno == errno.ENOENT else f" ({(err.strerror or str(err)).lower()})"  # (ENOENT: /proc's answer)
        raise ValueError(f"cannot write {p}: {nearest} takes no new files{why}") from None
    try:
        os.close(fd)
    finally:
        os.unlink(probe)
    return p


def _beside(target: Path, make: Callable[[Path], None]) -> Path:
    """A new temporary path beside ``target``, made by ``make`` (which fails if it exists: another writer's name)."""
    while True:
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            make(tmp)
            return tmp
        except FileExistsError:  # 48 random bits: drawn again
            continue


def new_folder_beside(target: Path) -> Path:
    """A new empty folder beside ``target``, made as ``mkdir`` makes one (0777 less the umask)."""
    return _beside(target, lambda p: p.mkdir(mode=0o777))


def new_file_beside(target: Path) -> Path:
    """A new empty file beside ``target``, made as ``open(..., "x")`` makes one (0666 less the umask)."""
    return _beside(target, lambda p: os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)))


def as_new_files(folder: Path) -> None:
    """Give each file in ``folder`` (made by :func:`new_folder_beside`) the mode a new file gets, whatever its writer
    gave it: 0666 less the umask, read from the folder's own mode."""
    mode = 0o666 & stat.S_IMODE(folder.stat().st_mode)
    for path in folder.iterdir():
        if path.is_file():
            path.chmod(mode)


def write_file(target: Path, write: Callable[[Path], object]) -> Path:
    """``write(tmp)`` into a new file beside ``target``, then rename it into place: the file keeps ``target``'s mode
    where it replaces one, else gets a new file's; nothing is left behind when ``write`` fails."""
    tmp = new_file_beside(target)
    try:
        mode = stat.S_IMODE((target if target.exists() else tmp).stat().st_mode)
        write(tmp)
        os.chmod(tmp, mode)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except SafetensorError as err:
        tmp.unlink(missing_ok=True)
        raise as_os_error(err, target) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def as_os_error(err: SafetensorError, target: Path) -> Exception:
    """safetensors' own error for a write the system refused (a full disk: "Error while serializing: I/O error: No space
    left on device (os error 28)") as the ``OSError`` it is, naming ``target``, which the command line reports in one
    line; any other of its errors as it is."""
    code = re.search(r"\(os error (\d+)\)", str(err))
    return OSError(int(code[1]), os.strerror(int(code[1])), str(target)) if code else err
