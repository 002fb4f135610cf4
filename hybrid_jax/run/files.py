"""Writes a crash cannot half-do, and the one file lock.

Every file of a run is replaced atomically (temp file, fsync, rename); logs are only appended
to. A lock is an ``flock`` on a file in the run directory, held for the holder's lifetime:
the kernel drops it when the process dies, so a killed trainer never leaves a stale lock.
"""

import fcntl
import os
from pathlib import Path


def atomic_write_bytes(path, data: bytes):
  """Write a temp file beside ``path``, fsync it, rename it over ``path``: a reader (or a
  crash) sees the old file or the new one, never half of one."""
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
  with open(tmp, "wb") as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def atomic_write_text(path, text: str):
  atomic_write_bytes(path, text.encode("utf-8"))


def append_line(path, line: str, fsync: bool):
  """Append one line; a torn last line (a crash mid-write) is ended first so that it cannot
  swallow this record. Appends only: a log is never rewritten here."""
  with open(path, "ab+") as f:
    f.seek(0, os.SEEK_END)
    if f.tell():
      f.seek(-1, os.SEEK_END)
      if f.read(1) != b"\n":
        line = "\n" + line
    f.write((line + "\n").encode())
    f.flush()
    if fsync:
      os.fsync(f.fileno())


class FileLock:
  """An exclusive, non-blocking flock on ``path``: ``acquire()`` says whether it was taken,
  ``held()`` whether another process holds it now."""

  def __init__(self, path):
    self.path = Path(path)
    self._file = None

  def acquire(self) -> bool:
    if self._file is not None:
      return True
    self.path.parent.mkdir(parents=True, exist_ok=True)
    f = open(self.path, "w")
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      f.close()
      return False
    self._file = f
    return True

  def release(self):
    if self._file is not None:
      fcntl.flock(self._file, fcntl.LOCK_UN)
      self._file.close()
      self._file = None

  def held(self) -> bool:
    """Whether another process holds the lock (never creates the file)."""
    if self._file is not None:
      return False
    try:
      f = open(self.path, "a")
    except FileNotFoundError:
      return False
    with f:
      try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        return True
      fcntl.flock(f, fcntl.LOCK_UN)
    return False
