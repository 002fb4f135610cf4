"""Where a run's checkpoints are, and which of their steps are finished, from names and one
marker file alone (no orbax, no JAX).

A run's checkpoints are ``<run>/checkpoints``, or, when its config sets ``checkpoint.root``,
``<checkpoint.root>/<run directory name>``: a bucket (``gs://bucket/prefix``) can hold orbax's
steps, not the run directory itself (its lock and renames need POSIX,
``hybrid_jax.launch.run_root``). Every reader and writer finds them through
``checkpoint_dir`` (``RunDir.checkpoint_dir``), as an etils path, local or gs://.

A finished step is a directory named by its number. Locally orbax writes a step under a
temporary name (``N.orbax-checkpoint-tmp*``) and renames it when complete. A bucket has no
rename: orbax writes the step in place and writes ``commit_success.txt`` into it last
(``orbax.checkpoint._src.path.atomicity.CommitFileTemporaryPath``, which orbax picks for every
``gs://`` path), so there a numbered step without that file is a save that never finished.
"""

import os
from pathlib import Path

from etils import epath

from hybrid_jax.configs.rules import BUCKET_SCHEME, checkpoint_root_problem
from hybrid_jax.run.config import read_config_json
from hybrid_jax.run.errors import RunDirError

CHECKPOINT_DIR = "checkpoints"
COMMIT_FILE = "commit_success.txt"      # orbax's atomicity_types.COMMIT_SUCCESS_FILE
TMP_SUFFIX = ".orbax-checkpoint-tmp"    # orbax's; older versions append a timestamp


def is_bucket(path) -> bool:
  return str(path).startswith(BUCKET_SCHEME)


class CheckpointPath(type(epath.Path())):
  """An etils path whose ``absolute()`` keeps a gs:// URL as it is (etils' ``absolute()``
  is its ``resolve()``, which makes a URL a local path under the working directory); a local
  one is resolved as pathlib does."""

  def resolve(self, strict: bool = False):
    return self if is_bucket(self) else super().resolve(strict)


def checkpoint_root(config: dict | None) -> str | None:
  """``checkpoint.root`` of a run's config.json values (None when unset or absent)."""
  section = (config or {}).get("checkpoint")
  return section.get("root") if isinstance(section, dict) else None


def checkpoint_dir(workdir, config: dict | None = None) -> CheckpointPath:
  """The checkpoint directory of the run in ``workdir``; ``config``: its config.json values
  (read from the run when None). A root this process cannot reach is one line."""
  root = checkpoint_root(read_config_json(workdir) if config is None else config)
  if root is None:
    return CheckpointPath(workdir) / CHECKPOINT_DIR
  problem = checkpoint_root_problem(root)
  if problem:
    raise RunDirError(f"{workdir}: its checkpoints are under checkpoint.root={root}: {problem}")
  return CheckpointPath(root) / Path(os.path.abspath(workdir)).name


def is_finished(step_dir) -> bool:
  """Whether ``step_dir`` (a directory named by its step) holds a finished orbax save."""
  step_dir = CheckpointPath(step_dir)
  return (step_dir / COMMIT_FILE).exists() if is_bucket(step_dir) else step_dir.is_dir()


def partial_saves(directory) -> list[CheckpointPath]:
  """What saves that never finished left in the checkpoint ``directory``: orbax's temporary
  directories, and in a bucket the numbered steps without the commit file (see above)."""
  directory = CheckpointPath(directory)
  if not directory.is_dir():
    return []
  return sorted(p for p in directory.iterdir()
                if (TMP_SUFFIX in p.name and p.is_dir())
                or (is_bucket(p) and p.name.isdigit() and not is_finished(p)))


def checkpoint_steps(workdir) -> list[int]:
  """Finished checkpoint steps, ascending; a one-line error when there are none."""
  path = checkpoint_dir(workdir)
  steps = []
  if path.is_dir():
    steps = sorted(int(p.name) for p in path.iterdir() if p.name.isdigit() and is_finished(p))
  if not steps:
    raise RunDirError(f"{path} holds no checkpoints")
  return steps
