"""Small state files that must survive a crash whole: the witness's held checkpoints and the
notary's memory of what it signed. A file is replaced, never edited in place: the new bytes go
to a temporary file, which is fsync'd and renamed over the old one, and then the folder is
fsync'd, so after a crash a reader finds the old file or the new one, never a torn one."""

from __future__ import annotations

import os
from pathlib import Path


def replace_durably(path: Path, data: bytes) -> None:
    """Make `data` the contents of `path`, durable before returning."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
