"""A run's checkpoints as a reader restores them, without touching the run.

The trainer's ``Checkpointer`` creates directories and cleans up temporary ones, which could
delete a step a live trainer is still writing; readers therefore open the checkpoint
directory with a read-only orbax manager (in-progress steps are invisible to it) and
restore only the parameters: the optimizer moments, twice their size, are never read.
(Apart from ``checkpoints.py`` so that listing steps does not import orbax and JAX.)
"""

import logging
from pathlib import Path

import jax
import orbax.checkpoint as ocp

from hybrid_jax.run.checkpoints import CHECKPOINT_DIR
from hybrid_jax.run.errors import RunDirError


def open_read_only(workdir) -> ocp.CheckpointManager:
  """A read-only orbax manager on the run's checkpoints (it never creates nor deletes)."""
  absl_logger = logging.getLogger("absl")   # read-only opening warns; that is what we want
  level = absl_logger.level
  absl_logger.setLevel(logging.ERROR)
  try:
    return ocp.CheckpointManager(
        Path(workdir).absolute() / CHECKPOINT_DIR,
        options=ocp.CheckpointManagerOptions(read_only=True, create=False))
  finally:
    absl_logger.setLevel(level)


def restore_params(manager, workdir, step: int, abstract_params, sharding):
  """The Param state of checkpoint ``step`` (a partial restore: params only), each array
  in ``sharding`` whatever mesh saved it; a corrupt or foreign checkpoint is one line."""
  restore_args = jax.tree.map(lambda x: ocp.ArrayRestoreArgs(dtype=x.dtype, sharding=sharding),
                              abstract_params)
  target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
                        abstract_params)
  try:
    state = manager.restore(step, args=ocp.args.PyTreeRestore(
        item=dict(params=target), restore_args=dict(params=restore_args), partial_restore=True))
  except Exception as e:  # a corrupt or foreign checkpoint
    first = str(e).splitlines()[0] if str(e) else ""
    raise RunDirError(f"cannot restore checkpoint {step} of {workdir}: "
                      f"{type(e).__name__}: {first}") from e
  return state["params"]
