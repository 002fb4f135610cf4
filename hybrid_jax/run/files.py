"""Writes a crash cannot half-do, and the one file lock.

Every file of a run is replaced atomically (temp file, fsync, rename); logs are only appended
to. A lock is an ``flock`` on a file in the run directory, held for the holder's lifetime:
the kernel drops it when the process dies, so a killed trainer never leaves a stale lock.

A disk that is full or read-only (or a directory without write permission) is the user's to
fix: a write that meets one raises :class:`UnwritableError`, one line naming the file.
"""

import contextlib
import errno
import fcntl
import os
import re
from pathlib import Path

from hybrid_jax.errors import UserError

DISK_ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EACCES, errno.EPERM)
# TensorStore's errors (orbax raises them as ValueError) end "... [os_error_code='28']".
_OS_ERROR_CODE = re.compile(r"os_error_code\W{0,3}(\d+)")


class UnwritableError(UserError, OSError):
  """A file cannot be written: its disk is full or read-only, or permission is missing.
  Still an OSError (with ``errno``), so handlers of write failures keep working; ``reason``
  says which, naming the directory."""

  def __init__(self, path, code: int):
    where = Path(path).parent
    self.reason = (f"{where} is on a read-only file system" if code == errno.EROFS else
                   f"the disk of {where} is full" if code in (errno.ENOSPC, errno.EDQUOT) else
                   f"no permission to write in {where}")
    super().__init__(f"cannot write {path}: {self.reason} "
                     f"(errno {errno.errorcode.get(code, code)})")
    self.errno = code


def disk_errno(e: BaseException | None) -> int | None:
  """The errno of a full, read-only or forbidden disk that ``e`` is or wraps, else None.
  Orbax raises none of these as an OSError: a failed TensorStore write is a ValueError
  ("RESOURCE_EXHAUSTED: ... No space left on device [os_error_code='28']"), so the message
  counts as well. A device's RESOURCE_EXHAUSTED (out of memory) names no errno: not a disk."""
  seen = set()
  while e is not None and id(e) not in seen:
    seen.add(id(e))
    if isinstance(e, OSError) and e.errno in DISK_ERRNOS:
      return e.errno
    text = str(e)
    if (m := _OS_ERROR_CODE.search(text)) and int(m.group(1)) in DISK_ERRNOS:
      return int(m.group(1))
    for code in DISK_ERRNOS:
      if os.strerror(code) in text:
        return code
    e = e.__cause__ or e.__context__
  return None


def describe_disk_errno(code: int) -> str:
  """``No space left on device (errno ENOSPC)``."""
  return f"{os.strerror(code)} (errno {errno.errorcode.get(code, code)})"


def unwritable(path, e: OSError) -> UnwritableError | None:
  """``e`` as an UnwritableError when the disk is the cause; None otherwise."""
  code = disk_errno(e)
  return None if code is None else UnwritableError(path, code)


def atomic_write_bytes(path, data: bytes):
  """Write a temp file beside ``path``, fsync it, rename it over ``path``: a reader (or a
  crash) sees the old file or the new one, never half of one."""
  path = Path(path)
  tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
      with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
      os.replace(tmp, path)
    except BaseException:
      with contextlib.suppress(OSError):   # a full disk: free what the torn temp file took
        tmp.unlink()
      raise
  except OSError as e:
    if (err := unwritable(path, e)) is None:
      raise
    raise err from None


def atomic_write_text(path, text: str):
  atomic_write_bytes(path, text.encode("utf-8"))


def append_line(path, line: str, fsync: bool):
  """Append one line; a torn last line (a crash mid-write) is ended first so that it cannot
  swallow this record. Appends only: a log is never rewritten here."""
  try:
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
  except OSError as e:
    if (err := unwritable(path, e)) is None:
      raise
    raise err from None


class FileLock:
  """An exclusive, non-blocking flock on ``path``: ``acquire()`` says whether it was taken,
  ``held()`` whether another process holds it now."""

  def __init__(self, path):
    self.path = Path(path)
    self._file = None

  def acquire(self) -> bool:
    if self._file is not None:
      return True
    try:
      self.path.parent.mkdir(parents=True, exist_ok=True)
      f = open(self.path, "w")
    except OSError as e:
      if (err := unwritable(self.path, e)) is None:
        raise
      raise err from None
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

  def holding(self) -> bool:
    """Whether this process holds the lock."""
    return self._file is not None

  def held(self) -> bool:
    """Whether another process holds the lock (never creates nor writes the file: a
    read-only run directory can be asked too)."""
    if self._file is not None:
      return False
    try:
      f = open(self.path, "rb")
    except FileNotFoundError:
      return False
    with f:
      try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        return True
      fcntl.flock(f, fcntl.LOCK_UN)
    return False
