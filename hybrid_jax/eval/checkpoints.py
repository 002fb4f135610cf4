"""A run's saved checkpoints as models, read without touching the run.

The trainer's ``Checkpointer`` creates directories and cleans up temporary ones, which could
delete a step a live trainer is still writing; evaluation therefore opens the checkpoint
directory with a read-only orbax manager (in-progress steps are invisible to it).
"""

import json
import logging
from pathlib import Path

import jax
import ml_collections
import orbax.checkpoint as ocp

from hybrid_jax.resolve import resolve
from hybrid_jax.configs.base import base_config
from hybrid_jax.errors import UserError
from hybrid_jax.train.rundir import RunDir


class EvalInputError(UserError, ValueError):
  """Evaluation cannot run as asked (no run, no checkpoints, bad settings): one line."""


def merge_config(schema, values: dict, prefix=""):
  """``values`` (config.json) written into ``schema`` (lists back to tuples); keys the schema
  no longer knows are skipped, keys it gained keep their defaults."""
  for key, value in values.items():
    if key == "derived" or key not in schema:
      continue
    if isinstance(schema[key], ml_collections.ConfigDict):
      merge_config(schema[key], value, f"{prefix}{key}.")
    else:
      schema[key] = tuple(value) if isinstance(value, list) else value


def load_run_config(workdir) -> ml_collections.ConfigDict:
  """The run's config (unresolved, with the current schema's defaults for missing keys)."""
  run = RunDir(workdir)
  if not run.path.is_dir():
    raise EvalInputError(f"run directory {run.path} does not exist")
  try:
    values = json.loads(run.config_path.read_text())
  except FileNotFoundError:
    raise EvalInputError(f"{run.path} is not a run directory (no config.json)") from None
  except json.JSONDecodeError as e:
    raise EvalInputError(f"{run.config_path} is not valid JSON ({e})") from None
  cfg = base_config()
  merge_config(cfg, values)
  return cfg


def checkpoint_steps(workdir) -> list[int]:
  """Completed checkpoint steps, ascending; a one-line error when there are none."""
  run = RunDir(workdir)
  steps = []
  if run.checkpoint_dir.is_dir():
    steps = sorted(int(p.name) for p in run.checkpoint_dir.iterdir()
                   if p.name.isdigit() and p.is_dir())
  if not steps:
    raise EvalInputError(f"{run.checkpoint_dir} holds no checkpoints")
  return steps


class RunModels:
  """Restores the params of any checkpoint step of one run; ``graphdef``/``rest`` are the
  static parts every step shares (so one jitted forward serves all steps)."""

  def __init__(self, workdir, cfg=None):
    from hybrid_jax.train.loop import init_state
    self.run = RunDir(workdir)
    self.cfg = resolve(cfg if cfg is not None else load_run_config(workdir))
    self.steps = checkpoint_steps(workdir)
    self.graphdef, self.rest, state, _, _ = init_state(self.cfg)
    # Params only: the optimizer moments (2x the params) are neither read nor kept.
    self._abstract = jax.eval_shape(lambda: state["params"])
    # ... into this process's devices, whatever mesh the run was trained on.
    self._restore_args = jax.tree.map(
        lambda x: ocp.ArrayRestoreArgs(dtype=x.dtype, sharding=x.sharding), state["params"])
    del state
    absl_logger = logging.getLogger("absl")   # read-only mode is what we want: no warnings
    level = absl_logger.level
    absl_logger.setLevel(logging.ERROR)
    try:
      self._manager = ocp.CheckpointManager(
          Path(self.run.checkpoint_dir).absolute(),
          options=ocp.CheckpointManagerOptions(read_only=True, create=False))
    finally:
      absl_logger.setLevel(level)

  def params(self, step: int):
    if step not in self.steps:
      raise EvalInputError(f"{self.run.checkpoint_dir} has no checkpoint {step} "
                           f"(it has {', '.join(map(str, self.steps))})")
    try:
      state = self._manager.restore(step, args=ocp.args.PyTreeRestore(
          item=dict(params=self._abstract), restore_args=dict(params=self._restore_args),
          partial_restore=True))
    except Exception as e:  # a corrupt or foreign checkpoint
      first = str(e).splitlines()[0] if str(e) else ""
      raise EvalInputError(f"cannot restore checkpoint {step} of {self.run.path}: "
                           f"{type(e).__name__}: {first}") from e
    return state["params"]

  def close(self):
    self._manager.close()
