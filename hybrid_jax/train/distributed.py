"""Multi-process (multi-host) JAX, started from the environment before any backend exists.

One process per host (or per GPU) runs the same ``hybrid-jax train`` command. The
coordinator comes from, in order: explicit settings (``--coordinator HOST:PORT
--num_processes N --process_id I``, or the ``HYBRID_JAX_COORDINATOR`` /
``HYBRID_JAX_NUM_PROCESSES`` / ``HYBRID_JAX_PROCESS_ID`` variables); a Slurm step with
several tasks (``srun``: JAX reads the Slurm variables); a multi-host TPU slice (JAX reads
the TPU metadata). A single process needs none of it.
"""

import os
import time

import jax

ENV = ("HYBRID_JAX_COORDINATOR", "HYBRID_JAX_NUM_PROCESSES", "HYBRID_JAX_PROCESS_ID")


def requested() -> str | None:
  """Why this process should join a multi-process job, or None."""
  if os.environ.get(ENV[0]):
    return "explicit"
  if int(os.environ.get("SLURM_STEP_NUM_TASKS", os.environ.get("SLURM_NTASKS", "1")) or 1) > 1 \
      and "SLURM_STEP_ID" in os.environ:
    return "slurm"
  if "," in os.environ.get("TPU_WORKER_HOSTNAMES", ""):
    return "tpu"
  return None


def initialize() -> int:
  """Join the job the environment describes (once; a no-op for a single process); returns
  the process count."""
  how = requested()
  if how is None or jax.distributed.is_initialized():
    return jax.process_count()
  # CPU processes exchange collectives through gloo (GPU/TPU use their own transports).
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if how == "explicit":
    jax.distributed.initialize(coordinator_address=os.environ[ENV[0]],
                               num_processes=int(os.environ[ENV[1]]),
                               process_id=int(os.environ[ENV[2]]))
  else:
    jax.distributed.initialize()
  return jax.process_count()


def is_primary() -> bool:
  """Process 0 writes the run directory's files; every process trains and checkpoints."""
  return jax.process_index() == 0


# gloo's TCP event loop (``gloo::transport::tcp::Loop::run``) waits in epoll_wait with
# 64 events and a 10 ms timeout: /proc/<tid>/syscall reads "232 <epfd> <events> 0x40 0xa".
_GLOO_LOOP_SYSCALL = ("232", "0x40", "0xa")


def quiet_gloo_threads(scans: int = 50) -> int:
  """Lower gloo's event-loop threads to nice 19 (Linux, CPU multi-process jobs); returns how
  many. Why: that loop busy-polls epoll while a collective is in flight, and in a process
  pinned to one core (``train --local_processes``) the thread running the step then waits
  for the scheduler to preempt the loop (a whole tick, 4 ms here) after each all-reduce:
  every all-reduce took 4.0 ms whatever its size. At nice 19 the woken step preempts it at
  once (issue 19's notes: the toy-B4 step of two processes 36 -> 25-31 ms). Call it after
  the first collective (the loop starts with gloo's first context); a loop thread caught
  running rather than waiting is looked for again, ``scans`` times at most."""
  if jax.process_count() == 1 or jax.default_backend() != "cpu":
    return 0
  try:
    tids = os.listdir("/proc/self/task")
  except OSError:                                 # not Linux: nothing to do
    return 0
  found = set()
  for _ in range(scans):
    for tid in tids:
      try:
        call = open(f"/proc/self/task/{tid}/syscall").read().split()
      except OSError:                             # the thread ended, or /proc hides it
        continue
      if tid not in found and (call[:1] + call[3:5]) == list(_GLOO_LOOP_SYSCALL):
        os.setpriority(os.PRIO_PROCESS, int(tid), 19)
        found.add(tid)
    if found:
      return len(found)
    time.sleep(0.001)
  return 0
