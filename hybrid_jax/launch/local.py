"""The local backend: a pool of worker processes, each training one run.

Processes, not threads: on a small CPU two single-threaded JAX processes use the machine
better than one process with two threads, so with more than one worker each is pinned to a
core of its own (CPU affinity: XLA:CPU sizes its thread pool by it; the XLA flags alone
leave two busy pool threads per worker, which then compete for the same cores). A worker
that finds its run held by another trainer (a second launcher, an orphan finishing its
checkpoint) exits 75 and is retried a few seconds later; a preempted
one is resumed from its checkpoint. Workers die with the launcher (PR_SET_PDEATHSIG sends
them SIGTERM, so they checkpoint and mark themselves preempted), and a resubmission picks
them up where they stopped.
"""

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

from hybrid_jax.launch.worker import BUSY_EXIT_CODE
from hybrid_jax.run import RunDir

PREEMPTED = 143
BUSY_RETRY_S = 3.0
PR_SET_PDEATHSIG = 1


def default_parallel() -> int:
  return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def die_with_parent():
  try:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
  except OSError:
    pass   # not Linux: workers then outlive a killed launcher, and resubmission waits for them


def start_on(cpu: int | None):
  """The worker's preexec: die with the launcher; run on ``cpu`` alone when given."""
  def preexec():
    die_with_parent()
    if cpu is not None and hasattr(os, "sched_setaffinity"):
      os.sched_setaffinity(0, {cpu})
  return preexec


def worker_cpus(parallel: int) -> list[int] | None:
  """One core per worker slot when there are enough cores for every worker; else None
  (workers then share the cores, unpinned)."""
  if parallel < 2 or not hasattr(os, "sched_getaffinity"):
    return None
  cpus = sorted(os.sched_getaffinity(0))
  return cpus[:parallel] if len(cpus) >= parallel else None


def _held(run_dir: Path) -> bool:
  """Whether another process holds the run's trainer lock (see RunDir.lock)."""
  return RunDir(run_dir).lock_held()


def single_threaded(env: dict) -> dict:
  """``env`` with XLA:CPU kept to one thread (unless its XLA_FLAGS already set a count)."""
  env = dict(env)
  flags = env.get("XLA_FLAGS", "")
  if "intra_op_parallelism_threads" not in flags:
    env["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=false "
                        "intra_op_parallelism_threads=1").strip()
  return env


def worker_env(parallel: int, cache_dir: Path) -> dict:
  env = dict(os.environ)
  env.setdefault("JAX_COMPILATION_CACHE_DIR", str(cache_dir))
  return single_threaded(env) if parallel > 1 else env


def run_local(run_dirs: list[Path], *, parallel: int, cache_dir: Path, max_retries: int = 2,
              log=print) -> dict:
  """Train every run; returns {run name: final exit code}. Keeps ``parallel`` workers busy
  while runs remain."""
  env = worker_env(parallel, cache_dir)
  free_cpus = worker_cpus(parallel)                      # None: unpinned
  cpu_of: dict[subprocess.Popen, int] = {}
  queue = deque((Path(d), 0.0) for d in run_dirs)      # (run dir, not before time)
  retries = {Path(d).name: 0 for d in run_dirs}
  running: dict[subprocess.Popen, Path] = {}
  waits = {}                                             # backoff of runs held elsewhere
  results = {}
  stop = {"signum": None}

  def on_signal(signum, frame):
    stop["signum"] = signum
    for p in running:
      p.send_signal(signal.SIGTERM)

  old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
  try:
    while queue or running:
      if stop["signum"] is None:
        for _ in range(len(queue)):
          if len(running) >= parallel:
            break
          run_dir, not_before = queue.popleft()
          if time.monotonic() < not_before:
            queue.append((run_dir, not_before))
            continue
          if _held(run_dir):      # check here: a worker would cost a Python + JAX start-up
            waits[run_dir.name] = min(2 * waits.get(run_dir.name, BUSY_RETRY_S / 2), 30.0)
            queue.append((run_dir, time.monotonic() + waits[run_dir.name]))
            continue
          cpu = free_cpus.pop(0) if free_cpus else None
          with open(run_dir / "train.log", "a") as log_file:
            p = subprocess.Popen([sys.executable, "-m", "hybrid_jax.launch.worker", str(run_dir)],
                                 stdout=log_file, stderr=subprocess.STDOUT, env=env,
                                 preexec_fn=start_on(cpu))
          running[p] = run_dir
          if cpu is not None:
            cpu_of[p] = cpu
          RunDir(run_dir).mark_started(p.pid)   # sweep status: running from now, not pending
          log(f"started  {run_dir.name} (pid {p.pid})")
      for p in [p for p in running if p.poll() is not None]:
        run_dir = running.pop(p)
        if p in cpu_of:
          free_cpus.append(cpu_of.pop(p))
        code, name = p.returncode, run_dir.name
        if code == BUSY_EXIT_CODE and stop["signum"] is None:
          queue.append((run_dir, time.monotonic() + BUSY_RETRY_S))
          log(f"busy     {name}: held by another trainer; retrying")
        elif code in (PREEMPTED, -signal.SIGTERM) and stop["signum"] is None and retries[name] < max_retries:
          retries[name] += 1
          queue.append((run_dir, 0.0))
          log(f"resuming {name} (preempted)")
        else:
          results[name] = code
          log(f"{'finished' if code == 0 else 'stopped ' if code == PREEMPTED else 'failed  '} "
              f"{name} (exit {code})")
      if stop["signum"] is not None and not running:
        break
      time.sleep(0.2)
  finally:
    for s, h in old.items():
      signal.signal(s, h)
  if stop["signum"] is not None:
    raise KeyboardInterrupt(f"launcher stopped by signal {stop['signum']}; workers checkpointed")
  return results
