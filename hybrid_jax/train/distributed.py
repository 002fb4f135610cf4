"""Multi-process (multi-host) JAX, started from the environment before any backend exists.

One process per host (or per GPU) runs the same ``hybrid-jax train`` command. The
coordinator comes from, in order: explicit settings (``--coordinator HOST:PORT
--num_processes N --process_id I``, or the ``HYBRID_JAX_COORDINATOR`` /
``HYBRID_JAX_NUM_PROCESSES`` / ``HYBRID_JAX_PROCESS_ID`` variables); a Slurm step with
several tasks (``srun``: JAX reads the Slurm variables); a multi-host TPU slice (JAX reads
the TPU metadata). A single process needs none of it.
"""

import os

import jax
import numpy as np
from jax.experimental import multihost_utils

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


def any_process(flag: bool) -> bool:
  """Whether ``flag`` is set on any process (so a SIGTERM seen by one host stops all of them
  at the same step, instead of leaving the others waiting in a collective)."""
  if jax.process_count() == 1:
    return flag
  return bool(np.any(multihost_utils.process_allgather(np.asarray(flag))))
