"""Writing an output file so that it is either the old file or the whole new one.

The commands write into folders other people's jobs write too (a run folder on a shared file
system): a file is written next to its destination under a name nobody else can have taken, then
renamed over it. A failure halfway (a full disk, an error while rendering) leaves what was there;
a link planted at the destination is replaced by the file, not followed to where it points.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_file(path: str | Path, data: bytes | bytearray | Iterable[bytes]) -> None:
    """``data`` (or its chunks, written as they come) as the file ``path`` (its folder must exist),
    readable as a file the user created with ``open`` would be; OSError when it cannot be written,
    and then ``path`` is unchanged (so too when making a chunk raises)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in (data,) if isinstance(data, bytes | bytearray) else data:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), 0o666 & ~_umask())  # mkstemp makes it 0600
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
