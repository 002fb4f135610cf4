"""Atomic file writes: a reader (or a crash) never sees a half-written file."""

import os
from pathlib import Path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
  with open(tmp, "wb") as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
  atomic_write_bytes(path, text.encode("utf-8"))
