"""The run directory contract: config.json, status.json, metrics.jsonl, checkpoints/,
tensorboard/, eval.jsonl. Every file is replaced atomically (write a temp file, then rename),
so a crash at any moment leaves either the old or the new version, never half of one; the
.jsonl logs are appended line by line and their readers drop a torn last line."""

import fcntl
import json
import os
import time
from pathlib import Path

STATES = ("running", "done", "failed", "preempted")


class RunDirError(RuntimeError):
  """The run directory cannot be used as asked (held by another process, other config)."""


class RunDirBusy(RunDirError):
  """Another process holds the run's lock (a launcher retries such a run later)."""


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


# Sections that say how a run is executed, not what it computes: a run may resume with
# other values (e.g. on another mesh: checkpoints restore onto any mesh).
EXECUTION_SECTIONS = ("mesh",)


def config_diff(old: dict, new: dict, prefix="") -> list[str]:
  out = []
  for key in sorted(set(old) | set(new)):
    if not prefix and key in EXECUTION_SECTIONS:
      continue
    a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
    if isinstance(a, dict) and isinstance(b, dict):
      out += config_diff(a, b, f"{prefix}{key}.")
    elif a != b:
      out.append(f"{prefix}{key}: {a!r} -> {b!r}")
  return out


class RunDir:
  def __init__(self, workdir, writer: bool = True):
    """``writer=False``: a process of a multi-process job other than process 0; it reads
    the run's files but writes none (process 0 writes them) and takes no lock."""
    self.writer = writer
    self.path = Path(workdir)
    self.config_path = self.path / "config.json"
    self.status_path = self.path / "status.json"
    self.metrics_path = self.path / "metrics.jsonl"
    self.checkpoint_dir = self.path / "checkpoints"
    self.tensorboard_dir = self.path / "tensorboard"
    self.eval_path = self.path / "eval.jsonl"
    self._lock_file = None
    self._eval_lock_file = None

  def lock(self):
    """Hold an exclusive lock for this process's lifetime: one trainer per run, ever."""
    if not self.writer:
      return
    self.path.mkdir(parents=True, exist_ok=True)
    self._lock_file = open(self.path / ".lock", "w")
    try:
      fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      self._lock_file.close()
      self._lock_file = None
      raise RunDirBusy(f"run directory {self.path} is in use by another process") from None

  def unlock(self):
    if self._lock_file is not None:
      fcntl.flock(self._lock_file, fcntl.LOCK_UN)
      self._lock_file.close()
      self._lock_file = None

  def check_or_write_config(self, config: dict):
    """First run: write config.json. Later runs: refuse a config that differs."""
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
      atomic_write_text(self.config_path, json.dumps(config, indent=2, sort_keys=True) + "\n")

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
                  updated=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    atomic_write_text(self.status_path, json.dumps(status) + "\n")

  def read_metrics(self) -> list[dict]:
    """The complete, parseable metric records (a torn last line is dropped)."""
    if not self.metrics_path.exists():
      return []
    records = []
    for line in self.metrics_path.read_text().splitlines():
      try:
        records.append(json.loads(line))
      except json.JSONDecodeError:
        break
    return records

  def truncate_metrics(self, last_step: int):
    """Drop records past the restored checkpoint: they will be logged again, identically."""
    if not self.writer:
      return
    records = [r for r in self.read_metrics() if r["step"] <= last_step]
    atomic_write_text(self.metrics_path, "".join(json.dumps(r) + "\n" for r in records))

  def append_metrics(self, record: dict):
    if not self.writer:
      return
    with open(self.metrics_path, "a") as f:
      f.write(json.dumps(record) + "\n")

  # --- eval.jsonl: one record per (checkpoint step, eval settings id) -----------------

  def read_eval(self) -> list[dict]:
    """Complete eval records in file order; unparseable (torn) lines are skipped and a
    repeated (step, settings_id) keeps its first record."""
    if not self.eval_path.exists():
      return []
    records, seen = [], set()
    for line in self.eval_path.read_text().splitlines():
      try:
        r = json.loads(line)
      except json.JSONDecodeError:
        continue
      if not isinstance(r, dict):
        continue
      key = (r.get("step"), r.get("settings_id"))
      if key not in seen:
        seen.add(key)
        records.append(r)
    return records

  def append_eval(self, record: dict):
    """Append one line, flushed and fsynced; a torn last line (a crash mid-write) is ended
    first so it cannot swallow this record."""
    line = json.dumps(record) + "\n"
    with open(self.eval_path, "ab+") as f:
      f.seek(0, os.SEEK_END)
      if f.tell():
        f.seek(-1, os.SEEK_END)
        if f.read(1) != b"\n":
          line = "\n" + line
      f.write(line.encode())
      f.flush()
      os.fsync(f.fileno())

  def lock_eval(self):
    """One evaluator per run at a time (the trainer's own lock is separate)."""
    self._eval_lock_file = open(self.path / ".eval.lock", "w")
    try:
      fcntl.flock(self._eval_lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      self._eval_lock_file.close()
      self._eval_lock_file = None
      raise RunDirError(f"run directory {self.path} is being evaluated by another process") from None

  def unlock_eval(self):
    if self._eval_lock_file is not None:
      fcntl.flock(self._eval_lock_file, fcntl.LOCK_UN)
      self._eval_lock_file.close()
      self._eval_lock_file = None
