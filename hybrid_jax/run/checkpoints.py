"""A run's checkpoint steps, listed from the directory names alone (no orbax, no JAX)."""

from pathlib import Path

from hybrid_jax.run.errors import RunDirError

CHECKPOINT_DIR = "checkpoints"


def checkpoint_steps(workdir) -> list[int]:
  """Completed checkpoint steps, ascending; a one-line error when there are none."""
  path = Path(workdir) / CHECKPOINT_DIR
  steps = []
  if path.is_dir():
    steps = sorted(int(p.name) for p in path.iterdir() if p.name.isdigit() and p.is_dir())
  if not steps:
    raise RunDirError(f"{path} holds no checkpoints")
  return steps
