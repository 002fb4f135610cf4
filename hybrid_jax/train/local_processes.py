"""``hybrid-jax train --local_processes N``: one run as N single-threaded processes on this
host, one per core, data parallel: the multi-process JAX job of several hosts
(``train.distributed``, gloo between processes), started here.

Why: one process on every core splits each op over the cores, and attention's many small ops
scale poorly so (1.2-1.5x on two cores, where the matmuls scale 2x); a process per core runs
its own rows on its own core, and the step sums the gradients in one all-reduce
(``train.step.flat_data_parallel``). ``hybrid-jax bench train --processes N`` measures it.

The parent checks the flags and the config, starts the processes, forwards SIGTERM and
SIGINT to them (they checkpoint and stop at the same step) and, when one fails, stops the
others (they would wait in a collective). Process 0 prints; the others' stdout is dropped.
No JAX backend starts here.
"""

import os
import signal
import socket
import subprocess
import sys
import time

from hybrid_jax.core.eval_config import EvalConfig
from hybrid_jax.errors import UserError
from hybrid_jax.train.config import TrainConfig


def usable_cores() -> list[int]:
  if hasattr(os, "sched_getaffinity"):
    return sorted(os.sched_getaffinity(0))
  return list(range(os.cpu_count() or 1))


def check(n: int, cfg) -> None:
  """One-line UserError unless ``n`` processes can run ``cfg`` (a resolved config) here."""
  cores = usable_cores()
  if not 1 <= n <= len(cores):
    raise UserError(f"--local_processes must be 1..{len(cores)} (the cores this process may "
                    f"use); got {n}")
  t, ev = TrainConfig.from_config(cfg.train), EvalConfig.from_config(cfg.eval)
  k = t.microbatches
  if t.batch_size % (n * k):
    raise UserError(f"--local_processes {n}: config.train.batch_size ({t.batch_size}) "
                    f"must be a multiple of the processes x microbatches ({n} x {k})")
  if ev.every:
    raise UserError(f"--local_processes {n}: config.eval.every: evaluation during multi-process "
                    "training is not supported; evaluate the checkpoints afterwards with "
                    "hybrid-jax eval")
  from hybrid_jax.train.sharding import mesh_shape   # MeshError (one line) on a bad mesh
  mesh_shape(cfg.mesh, n)


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def process_env(i: int, n: int, port: int) -> dict:
  """Environment of process ``i`` of ``n``: the job's coordinator, and one thread."""
  from hybrid_jax.train.distributed import ENV
  env = dict(os.environ, **dict(zip(ENV, ("127.0.0.1:%d" % port, str(n), str(i)))))
  # One thread each: the core is set by affinity (XLA:CPU's pool follows it); the flags also
  # turn off Eigen's own threads, as ``hybrid-jax bench train --threads 1`` does.
  env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
                      " intra_op_parallelism_threads=1").strip()
  return env


def run(train_argv: list[str], n: int, poll_s: float = 0.2, grace_s: float = 60.0) -> int:
  """``hybrid-jax train *train_argv`` as ``n`` processes; the first failing exit code, or 0.
  When one fails, the others get SIGTERM, and SIGKILL ``grace_s`` later."""
  cores, port, procs = usable_cores(), free_port(), []
  pin = hasattr(os, "sched_setaffinity")
  for i in range(n):
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "hybrid_jax.cli", "train", *train_argv],
        env=process_env(i, n, port),
        stdout=None if i == 0 else subprocess.DEVNULL,
        preexec_fn=(lambda c=cores[i]: os.sched_setaffinity(0, {c})) if pin else None))

  def forward(signum, _frame):
    for p in procs:
      if p.poll() is None:
        p.send_signal(signum)

  old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
  code, failed_at = 0, None
  try:
    while any(p.poll() is None for p in procs):
      failed = [p.returncode for p in procs if p.returncode not in (None, 0)]
      if failed and not code:
        code, failed_at = failed[0], time.monotonic()
        forward(signal.SIGTERM, None)        # the others would wait for it in a collective
      elif failed_at is not None and time.monotonic() - failed_at > grace_s:
        forward(signal.SIGKILL, None)        # stuck in a collective: checkpoints are atomic
      time.sleep(poll_s)
  finally:
    for s, handler in old.items():
      signal.signal(s, handler)
  return code or next((p.returncode for p in procs if p.returncode), 0)
