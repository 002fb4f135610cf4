"""Resuming a run: restore the newest checkpoint that can be restored, and say what the
metrics log lost.

A checkpoint that cannot be restored (truncated files, a disk error) does not end the run:
it is moved aside into ``checkpoints/corrupt/`` (never deleted) with one line naming the
step and why, and the next older one is tried. Training then continues from the step
actually restored, bit-exactly, and the metrics of the re-trained steps are rewritten. What
a save that failed (a full disk) or was killed left behind is never a checkpoint: it is
removed first (``N.orbax-checkpoint-tmp*``; in a bucket, a step without orbax's commit file:
``hybrid_jax.run.checkpoints``). Both work on a local or a gs:// checkpoint directory.

Bit-exact needs the same compute setup: XLA splits work over the devices and, on CPU, over
the cores the process may run on, so a run resumed where it sees another core count (a Slurm
node without CPU binding, a local run started unpinned) continues within rounding only. The
setup is kept in status.json and a change is said in one line.
"""

import os
import sys

from hybrid_jax.errors import one_line
from hybrid_jax.run.checkpoints import CheckpointPath, partial_saves
from hybrid_jax.run.restore import quiet_orbax_noise
from hybrid_jax.train.checkpoint import quiet_orbax_logs

CORRUPT_DIR = "corrupt"
CORRUPT_NOTE = "README.txt"


def _reason(e: BaseException) -> str:
  """The first informative line of a restore error (TensorStore and pybind add pages)."""
  first = next((line for line in str(e).splitlines() if line.strip()), "")
  return f"{type(e).__name__}: {one_line(first, limit=160)}" if first else type(e).__name__


def set_aside(checkpoint_dir, step: int):
  """Move checkpoint ``step`` into checkpoints/corrupt/ (a new name if one is there). The
  folder gets a note saying what it holds: in a bucket, where a folder exists only while
  something is in it, that also makes it exist for the rename (etils renames only into an
  existing folder)."""
  checkpoint_dir = CheckpointPath(checkpoint_dir)
  corrupt = checkpoint_dir / CORRUPT_DIR
  corrupt.mkdir(exist_ok=True)
  (corrupt / CORRUPT_NOTE).write_text("Checkpoints that could not be restored, set aside by "
                                      "hybrid_jax.train.resume when the run resumed; never "
                                      "deleted by it.\n")
  target, n = corrupt / str(step), 1
  while target.exists():
    target, n = corrupt / f"{step}.{n}", n + 1
  (checkpoint_dir / str(step)).rename(target)
  return target


def remove_partial_saves(checkpoint_dir) -> list[str]:
  """Remove what saves that never completed left (``partial_saves``; names of those gone).
  Only the trainer calls it, holding the run's lock: no save of another process is live."""
  gone = []
  for path in partial_saves(checkpoint_dir):
    try:
      path.rmtree()
    except OSError:               # as much as can go goes; the rest is never a checkpoint
      pass
    gone.append(path.name)
  return gone


def restore_newest_intact(ckpt, abstract_state, *, primary: bool, log=None):
  """(state, step) of the newest checkpoint that restores; (None, 0) when none does.
  The trainer's first orbax call: orbax's noise is quiet from here on (``quiet_orbax_noise``)."""
  log = log or (lambda m: print(m, file=sys.stderr, flush=True))
  quiet_orbax_noise()
  if primary and remove_partial_saves(ckpt.directory):
    ckpt.reload()
  with quiet_orbax_logs():
    steps = sorted(ckpt.all_steps(), reverse=True)
  for step in steps:
    try:
      with quiet_orbax_logs():
        return ckpt.restore(step, abstract_state), step
    except Exception as e:          # a corrupt or foreign checkpoint: set it aside, go back
      where = "kept in place"
      if primary:
        where = f"moved to {set_aside(ckpt.directory, step)}"
        ckpt.reload()
      log(f"hybrid-jax: warning: checkpoint {step} cannot be restored ({_reason(e)}); "
          f"{where}; trying the previous one")
  return None, 0


def report_metrics_gap(run, start: int, log_every: int, total: int, log=None):
  """One line when metrics.jsonl is missing or ends before the restored step (the records
  of those steps are lost; training continues and logs the rest)."""
  log = log or (lambda m: print(m, file=sys.stderr, flush=True))
  if not start or not run.writer:
    return
  expected = start if start == total else start - start % log_every
  if not expected:
    return
  if not run.metrics_path.exists():
    log(f"hybrid-jax: warning: {run.metrics_path} is missing; the records of steps "
        f"1-{expected} are lost (training resumes at step {start})")
    return
  logged = [r["step"] for r in run.read_metrics() if r["step"] <= start]
  last = max(logged, default=0)
  if last < expected:
    log(f"hybrid-jax: warning: {run.metrics_path} ends at step {last}, before the restored "
        f"step {start}; the records of steps {last + 1}-{expected} are lost")


def compute_setup() -> str:
  """What the numerics depend on besides the config: backend, device count and, on CPU,
  the cores this process may use (XLA:CPU's thread pool is sized by them)."""
  import jax
  setup = f"{jax.default_backend()} x{jax.device_count()}"
  if jax.default_backend() == "cpu" and hasattr(os, "sched_getaffinity"):
    setup += f", {len(os.sched_getaffinity(0))} cores"
  return setup


def report_setup_change(previous_status: dict | None, setup: str, start: int, log=None):
  """One line when a resumed run computes on another setup than the one that trained it."""
  log = log or (lambda m: print(m, file=sys.stderr, flush=True))
  before = (previous_status or {}).get("setup")
  if start and before and before != setup:
    log(f"hybrid-jax: warning: resuming on {setup} where the run trained on {before}; the "
        f"losses continue within rounding, not bit for bit (XLA splits work by the setup)")
