"""Train one run of a sweep: ``python -m hybrid_jax.launch.worker RUN_DIR``.

The launcher writes the run's requested config to ``RUN_DIR/launch.json``; every backend
(local processes, Slurm jobs) runs this same entry point, so a run behaves the same however
it was scheduled. Exit codes: 0 done, 143 preempted, 75 the run is held by another trainer
(try later), 1 failed (status.json says why).
"""

import json
import os
import sys
from pathlib import Path

from hybrid_jax.errors import UserError
from hybrid_jax.run import LAUNCH_FILE, RunDir, RunDirBusy, config_from_values

BUSY_EXIT_CODE = 75


def read_launch(run_dir) -> dict:
  return json.loads((Path(run_dir) / LAUNCH_FILE).read_text())


def run(run_dir) -> int:
  if not RunDir(run_dir).lock_held():   # sweep status: running from now (JAX takes a while)
    RunDir(run_dir).mark_started(os.getpid())
  # lazy: importing JAX and the trainer takes seconds; the run is marked started first
  from hybrid_jax.train import distributed
  from hybrid_jax.train.loop import PREEMPTED_EXIT_CODE, Preempted
  from hybrid_jax.standard_run import train
  cfg = config_from_values(read_launch(run_dir)["config"])   # the schema's types, not raw JSON
  try:
    # A multi-process run (Slurm tasks, a Ray placement group) joins its job before anything
    # can start a JAX backend (the trainer's first-step note asks for one).
    distributed.initialize()
    status = train(cfg, run_dir, progress=False)
  except RunDirBusy as e:
    print(f"hybrid-jax worker: {e}", file=sys.stderr)
    return BUSY_EXIT_CODE
  except UserError as e:   # a run directory in the way, a NaN loss, a full disk: one line
    print(f"hybrid-jax worker: error: {e}", file=sys.stderr)
    return 1
  except Preempted as e:
    print(f"hybrid-jax worker: {e}", file=sys.stderr)
    return PREEMPTED_EXIT_CODE
  except Exception as e:   # status.json already holds the error line
    print(f"hybrid-jax worker: failed: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
    return 1
  print(f"hybrid-jax worker: {run_dir}: {status['state']} at step {status['step']}")
  return 0


if __name__ == "__main__":
  from hybrid_jax.platforms import keep_jax_on_cpu
  from hybrid_jax.xla_cache import use_persistent_compilation_cache
  # The worker runs on the host that trains (a Slurm node, a Ray node, this machine): there,
  # as for ``hybrid-jax train``, a host without a TPU or GPU starts no accelerator plugin.
  keep_jax_on_cpu("train")
  use_persistent_compilation_cache()
  sys.exit(run(sys.argv[1]))
