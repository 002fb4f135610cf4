"""The Slurm backend: submitit submits one job per run; the runs' own status.json and the
queue (squeue) say how they stand, since clusters without accounting cannot answer sacct.

A run that already has a job pending or running is not submitted again, and inside a job
the run's lock keeps a second trainer out, so resubmitting is always safe. A cancelled or
preempted job gets SIGTERM: the trainer checkpoints and marks the run preempted, and the
next submission resumes it.
"""

import json
import os
import subprocess
import time
from pathlib import Path

from hybrid_jax.launch.worker import run
from hybrid_jax.run import RunDir, atomic_write_text

JOB_FILE = "slurm_job.json"
JOB_PREFIX = "hj:"
DEFAULTS = dict(timeout_min=60, cpus_per_task=1, slurm_signal_delay_s=30)


def _queue() -> dict[str, str]:
  """{job id: state} of the jobs Slurm still lists as pending or running."""
  try:
    out = subprocess.run(["squeue", "-h", "-o", "%i %T", "-t", "PENDING,RUNNING,CONFIGURING,COMPLETING"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
  except (OSError, subprocess.SubprocessError) as e:
    raise RuntimeError(f"cannot read the Slurm queue (squeue): {e}".splitlines()[0]) from None
  return dict(line.split()[:2] for line in out.splitlines() if line.strip())


def active_job(run_dir: Path, queue: dict) -> str | None:
  try:
    job_id = json.loads((run_dir / JOB_FILE).read_text())["job_id"]
  except (OSError, ValueError, KeyError):
    return None
  return job_id if job_id in queue else None


def job_entry(run_dir: str, cache_dir: str) -> int:
  """What a Slurm job runs (unpickled by submitit on the node): set up the compilation
  cache and XLA threading before JAX is imported, then train the run."""
  os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", cache_dir)
  if os.environ.get("SLURM_CPUS_PER_TASK") == "1" and "intra_op" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                               "intra_op_parallelism_threads=1").strip()
  return run(run_dir)


def run_slurm(run_dirs: list[Path], params: dict, *, root: Path, cache_dir: Path, log=print,
              wait: bool = False, poll_s: float = 2.0) -> dict:
  """Submit one job per run not already queued; with ``wait``, poll until every job left the
  queue. Returns {run name: exit code}: 0 done, 143 preempted, 1 failed (after ``wait``),
  or -1 still queued/running (without it)."""
  import submitit   # lazy: optional dependency of the Slurm backend
  queue = _queue()
  executor = submitit.AutoExecutor(folder=root / ".slurm" / "%j", cluster="slurm")
  executor.update_parameters(**{**DEFAULTS, **params})
  jobs = {}
  for run_dir in map(Path, run_dirs):
    queued = active_job(run_dir, queue)
    if queued:
      log(f"queued   {run_dir.name}: job {queued} already pending or running")
      jobs[run_dir] = queued
      continue
    executor.update_parameters(name=JOB_PREFIX + run_dir.name)
    job = executor.submit(job_entry, str(run_dir.absolute()), str(Path(cache_dir).absolute()))
    atomic_write_text(run_dir / JOB_FILE, json.dumps(dict(job_id=job.job_id)) + "\n")
    log(f"submitted {run_dir.name}: job {job.job_id}")
    jobs[run_dir] = job.job_id
  if not wait:
    return {run_dir.name: -1 for run_dir in jobs}     # queued: status.json is from before
  while True:
    queue = _queue()
    if not any(j in queue for j in jobs.values()):
      break
    time.sleep(poll_s)
  codes = {"done": 0, "preempted": 143}
  return {run_dir.name: codes.get((RunDir(run_dir).read_status() or {}).get("state"), 1)
          for run_dir in jobs}
