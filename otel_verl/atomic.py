"""Writing an output file so that it is either the old file or the whole new one.

The commands and the guard write into folders other people's jobs write too (a run folder on a
shared file system): a file is written next to its destination under a name nobody else can have
taken, then renamed over it. A failure halfway (a full disk, an error while rendering) leaves what
was there; a link planted at the destination is replaced by the file, not followed to where it
points.

The temporary file is created with mode ``0o666`` through ``os.open``, so the kernel applies the
process's umask (and a folder's default ACL) exactly as for a file the user created with ``open``:
the umask is never read by setting it, which would change it for every thread of the process.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_NAME_TRIES = 100  # O_EXCL collisions on random names: as tempfile gives up


def _create_beside(path: Path) -> tuple[int, str]:
    """A new file next to ``path`` under a random name (never an existing file or link)."""
    for _ in range(_NAME_TRIES):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(tmp, _FLAGS, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name next to {path}")


def write_file(path: str | Path, data: bytes | bytearray | Iterable[bytes]) -> None:
    """``data`` (or its chunks, written as they come) as the file ``path`` (its folder must exist),
    readable as a file the user created with ``open`` would be; OSError when it cannot be written,
    and then ``path`` is unchanged (so too when making a chunk raises)."""
    path = Path(path)
    fd, tmp = _create_beside(path)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in (data,) if isinstance(data, bytes | bytearray) else data:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
