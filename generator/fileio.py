"""The only place the generator reads user files or writes its own. Reads are bounded and fail with one clear line;
writes are atomic (temporary file in the same directory, fsync, rename) and never replace a file without consent."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from generator.errors import UserError

MAX_INPUT_BYTES = 4 * 1024 * 1024  # topology files and configs are a few KB; anything this big is a mistake


def read_text(path: str, what: str, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """Read a user-supplied text file (`-` = stdin). `what` names it in errors ("topology file")."""
    if path == "-":
        try:
            data = sys.stdin.buffer.read(max_bytes + 1)
        except (OSError, AttributeError, ValueError) as exc:  # closed, detached or captured stdin
            raise UserError(f"cannot read the {what} from standard input: {exc}") from None
        where = "standard input"
    else:
        p = Path(path)
        if not p.exists():
            raise UserError(f"{what} {path!r} does not exist")
        if p.is_dir():
            raise UserError(f"{what} {path!r} is a directory, expected a file")
        try:
            size = p.stat().st_size
            if size > max_bytes:
                raise UserError(f"{what} {path!r} is {size:,} bytes; expected at most {max_bytes:,}")
            data = p.read_bytes()
        except PermissionError:
            raise UserError(f"{what} {path!r} is not readable (permission denied)") from None
        except OSError as exc:
            raise UserError(f"{what} {path!r} cannot be read: {exc.strerror or exc}") from None
        where = repr(path)
    if len(data) > max_bytes:
        raise UserError(f"{what} on {where} is larger than {max_bytes:,} bytes")
    if b"\x00" in data:
        raise UserError(f"{what} {where} is binary, expected text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {where} is not UTF-8 text (bad byte at offset {exc.start})") from None


def user_cache_dir() -> Path:
    """$XDG_CACHE_HOME/dist-config-generator (default ~/.cache/dist-config-generator): the calibration file and the
    counts of models built on the meta device."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dist-config-generator"


def check_writable(path: str | os.PathLike, force: bool) -> Path:
    """Fail early (before any work) if `path` exists without --force or its directory cannot take it."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"output {str(p)!r} is a directory; give a file name such as {str(p / 'config.yaml')!r}")
    if p.exists() and not force:
        raise UserError(f"{str(p)!r} already exists; pass --force to overwrite it or choose another --output")
    parent = p.parent if str(p.parent) else Path(".")
    if parent.exists() and not parent.is_dir():
        raise UserError(f"cannot write {str(p)!r}: {str(parent)!r} is not a directory")
    if parent.exists() and not os.access(parent, os.W_OK):
        raise UserError(f"cannot write {str(p)!r}: directory {str(parent)!r} is not writable")
    return p


def atomic_write(path: str | os.PathLike, text: str, force: bool = False, mode: int = 0o644) -> Path:
    """Write `text` to `path` so that a crash at any point leaves either the old file or the new one, never half."""
    p = check_writable(path, force)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as exc:
        raise _refused(p, exc) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        if not force and p.exists():  # appeared while we were writing
            raise UserError(f"{str(p)!r} appeared while writing; nothing was overwritten")
        os.replace(tmp, p)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _refused(p, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(p.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return p


def _refused(path: Path, exc: OSError) -> UserError:
    """The OS refused a write check_writable let through (a full disk, a read-only mount, /proc)."""
    return UserError(f"cannot write {str(path)!r}: {exc.strerror or exc}; nothing was written")


def read_json(path: str, what: str, max_bytes: int = MAX_INPUT_BYTES):
    """A user-supplied JSON file, parsed (read_text's checks, then one line naming the JSON error)."""
    import json

    text = read_text(path, what, max_bytes=max_bytes)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{what} {path!r} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
