"""The run directory contract: config.json, status.json, metrics.jsonl, checkpoints/ (or
the run's directory under ``checkpoint.root``, ``hybrid_jax.run.checkpoints``), tensorboard/,
eval.jsonl. Every file is replaced atomically (write a temp file, then rename),
so a crash at any moment leaves either the old or the new version, never half of one; the
.jsonl logs are appended line by line. Their readers never stop at a bad line: a malformed
or mistyped record in the middle is skipped with a one-line warning naming file:line (once
per process, however often it is read), a torn last line (a crash mid-write) is skipped
quietly, and a rewrite keeps every line it could not parse."""

import json
import numbers
import socket
import sys
import time
from pathlib import Path

from hybrid_jax.run.checkpoints import checkpoint_dir, checkpoint_root
from hybrid_jax.run.config import CONFIG_FILE, config_diff
from hybrid_jax.run.errors import RunDirBusy, RunDirError
from hybrid_jax.run.files import (FileLock, UnwritableError, append_line, atomic_write_bytes,
                                  atomic_write_text)

STATES = ("running", "done", "failed", "preempted")


# Types every record must have (numbers may be NaN: a diverged loss is still a record).
METRICS_TYPES = {"step": int, "tokens": int, "loss": numbers.Real}
EVAL_TYPES = {"step": int, "tokens": int, "settings_id": str}


def record_problem(record, types: dict) -> str | None:
  """Why ``record`` is not a valid record with ``types``, or None; other values must be
  numbers, strings, null or (settings) objects."""
  if not isinstance(record, dict):
    return f"a JSON {type(record).__name__}, not an object"
  for key, kind in types.items():
    value = record.get(key)
    if key == "settings_id" and value is None:
      continue
    if not isinstance(value, kind) or isinstance(value, bool):
      return f"{key} is {value!r}, not {'a number' if kind is numbers.Real else 'a ' + kind.__name__}"
  for key, value in record.items():
    if not isinstance(value, (numbers.Real, str, dict, list, type(None))):
      return f"{key} has type {type(value).__name__}"
    if key not in types and isinstance(value, str) and key != "settings_id":
      return f"{key} is the string {value[:20]!r}, not a number"
  return None


# (file, line number, line) of every bad line warned about: a process reads a file more than
# once (resume and the curves at the end, plot's run filter and its figure) and says it once.
_WARNED: set[tuple[str, int, bytes]] = set()


def _first_warning(path: Path, number: int, raw: bytes) -> bool:
  key = (str(Path(path).resolve()), number, raw)
  if key in _WARNED:
    return False
  _WARNED.add(key)
  return True


class RunDir:
  def __init__(self, workdir, writer: bool = True):
    """``writer=False``: a process of a multi-process job other than process 0; it reads
    the run's files but writes none (process 0 writes them) and takes no lock."""
    self.writer = writer
    self.setup = None        # the trainer's compute setup, kept in status.json (see resume.py)
    self.path = Path(workdir)
    self.config_path = self.path / CONFIG_FILE
    self.status_path = self.path / "status.json"
    self.metrics_path = self.path / "metrics.jsonl"
    self.tensorboard_dir = self.path / "tensorboard"
    self.eval_path = self.path / "eval.jsonl"
    self._lock = FileLock(self.path / ".lock")
    self._eval_lock = FileLock(self.path / ".eval.lock")
    self.skipped = 0            # bad records the readers skipped so far
    self._config = None         # config.json's values once this process checked or wrote them
    self._checkpoint_dir = None

  @property
  def checkpoint_dir(self):
    """Where the run's orbax steps are: ``<run>/checkpoints``, or under ``checkpoint.root``
    (an etils path, local or gs://, whose ``absolute()`` keeps a URL as it is). Found once:
    an evaluation asks for it at every step, and config.json does not change its root."""
    if self._checkpoint_dir is None:
      self._checkpoint_dir = checkpoint_dir(self.path, self._config)
    return self._checkpoint_dir

  def lock(self):
    """Hold an exclusive lock for this process's lifetime: one trainer per run, ever."""
    if not self.writer:
      return
    if not self._lock.acquire():
      raise RunDirBusy(f"run directory {self.path} is in use by another process") from None

  def lock_held(self) -> bool:
    """Whether some process holds the trainer lock: a run marked running without it died."""
    return self._lock.held()

  def mark_started(self, pid: int):
    """The launcher's note that a trainer process starts (JAX takes a while to import):
    ``sweep status`` shows the run as running from now on, while that process lives."""
    old = self.read_status() or {}
    status = dict(state="running", step=old.get("step", 0), total_steps=old.get("total_steps"),
                  error=None, pid=pid, host=socket.gethostname(),
                  updated=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    if "setup" in old:
      status["setup"] = old["setup"]
    atomic_write_text(self.status_path, json.dumps(status) + "\n")

  def unlock(self):
    self._lock.release()

  def fail_if_running(self, error: str) -> bool:
    """Mark the run failed with ``error`` when status.json says it is running and this
    process holds its lock (so no trainer of it lives): a failure the user caused before
    or during training must not leave a run that looks alive, nor one ``sweep status`` calls
    stale. A disk that cannot take even that keeps the old status. Whether it marked."""
    status = self.read_status() or {}
    if not self.writer or not self._lock.holding() or status.get("state") != "running":
      return False
    status.pop("pid", None)                 # the launcher's note of a process now gone
    status.update(state="failed", error=" ".join(error.split()), host=socket.gethostname(),
                  updated=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    try:
      atomic_write_text(self.status_path, json.dumps(status) + "\n")
    except OSError:
      return False
    return True

  def check_or_write_config(self, config: dict):
    """First run: write config.json. Later runs: refuse a config that differs. A first run
    whose checkpoint directory under ``checkpoint.root`` already holds something is refused:
    those are another run's (one of the same directory name), which it would resume."""
    if self.config_path.exists():
      try:
        old = json.loads(self.config_path.read_text())
      except json.JSONDecodeError as e:
        raise RunDirError(f"{self.config_path} is not valid JSON ({e}); refusing to overwrite it")
      diff = config_diff(old, config)
      if diff:
        raise RunDirError(f"{self.path} holds a run with another config ({'; '.join(diff[:5])}"
                          f"{'; ...' if len(diff) > 5 else ''}); use a new --workdir")
    elif self.writer:
      if checkpoint_root(config) is not None:
        taken = checkpoint_dir(self.path, config)
        if taken.is_dir() and next(iter(taken.iterdir()), None) is not None:
          raise RunDirError(f"{taken} holds another run's checkpoints ({self.path} is a new "
                            f"run of the same name); set another checkpoint.root, or "
                            f"remove them if that run is gone")
      atomic_write_text(self.config_path, json.dumps(config, indent=2, sort_keys=True) + "\n")
    self._config, self._checkpoint_dir = config, None

  def read_status(self) -> dict | None:
    try:
      return json.loads(self.status_path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
      return None

  def write_status(self, state: str, step: int, total_steps: int, error: str | None = None):
    if not self.writer:
      return
    assert state in STATES, state
    status = dict(state=state, step=step, total_steps=total_steps, error=error,
                  host=socket.gethostname(), updated=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    if self.setup is not None:
      status["setup"] = self.setup
    atomic_write_text(self.status_path, json.dumps(status) + "\n")

  def read_metrics(self) -> list[dict]:
    """The valid metric records in file order (bad lines skipped, see the module doc)."""
    return [r for _, r in self._read_jsonl(self.metrics_path, METRICS_TYPES) if r is not None]

  def truncate_metrics(self, last_step: int):
    """Drop records past the restored checkpoint: they will be logged again, identically.
    Lines that cannot be parsed are kept where they are (they may be all that is left of a
    record); only a torn last line, a crash mid-write, goes."""
    if not self.writer or not self.metrics_path.exists():
      return
    kept = [line for line, r in self._read_jsonl(self.metrics_path, METRICS_TYPES, warn=False)
            if r is None or r["step"] <= last_step]
    atomic_write_bytes(self.metrics_path, b"".join(line + b"\n" for line in kept))

  def append_metrics(self, record: dict):
    if self.writer:
      append_line(self.metrics_path, json.dumps(record), fsync=False)

  def _read_jsonl(self, path: Path, types: dict, warn: bool = True) -> list[tuple[bytes, dict | None]]:
    """(line, record or None if the line is bad) for every line but a torn last one; each
    bad line counts in ``self.skipped`` and is warned about (file:line) unless ``warn``."""
    try:
      data = path.read_bytes()
    except FileNotFoundError:
      return []
    lines = data.split(b"\n")
    torn = lines.pop()                       # b"" when the file ends with a newline
    out = []
    for number, raw in enumerate(lines, 1):
      reason = None
      try:
        record = json.loads(raw.decode("utf-8"))
        reason = record_problem(record, types)
      except (UnicodeDecodeError, json.JSONDecodeError):
        record, reason = None, "not a JSON line"
      if reason is not None:
        record = None
        self.skipped += 1
        if warn and raw.strip() and _first_warning(path, number, raw):
          print(f"hybrid-jax: warning: {path}:{number}: record skipped ({reason})",
                file=sys.stderr, flush=True)
      if raw.strip() or record is not None:
        out.append((raw, record))
    del torn                                 # a crash mid-write: that record is re-logged
    return out

  # --- eval.jsonl: one record per (checkpoint step, eval settings id) -----------------

  def read_eval(self) -> list[dict]:
    """Valid eval records in file order (bad lines skipped, see the module doc); a repeated
    (step, settings_id) keeps its first record."""
    records, seen = [], set()
    for _, r in self._read_jsonl(self.eval_path, EVAL_TYPES):
      if r is None:
        continue
      key = (r.get("step"), r.get("settings_id"))
      if key not in seen:
        seen.add(key)
        records.append(r)
    return records

  def append_eval(self, record: dict):
    append_line(self.eval_path, json.dumps(record), fsync=True)

  def lock_eval(self):
    """One evaluator per run at a time (the trainer's own lock is separate). A run that
    cannot be written (read-only) is refused here, before any compute: its records would
    have nowhere to go."""
    try:
      taken = self._eval_lock.acquire()
    except UnwritableError as e:
      raise RunDirError(f"cannot evaluate {self.path}: evaluation appends to {self.eval_path}, "
                        f"but {e.reason}; copy the run somewhere "
                        "writable and evaluate the copy") from None
    if not taken:
      raise RunDirError(f"run directory {self.path} is being evaluated by another process") from None

  def unlock_eval(self):
    self._eval_lock.release()
