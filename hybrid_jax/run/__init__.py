"""The run directory, the bottom layer every package reads and writes runs through: its
files and locks (``rundir``), atomic writes (``files``), its config (``config``), its
checkpoints as a reader sees them (``checkpoints``), the architecture label (``label``) and
runs as table rows (``collect``). It imports nothing of hybrid_jax above configs/errors."""

from hybrid_jax.run.checkpoints import checkpoint_steps
from hybrid_jax.run.collect import LAUNCH_FILE, collect_rows, rows_csv, run_dirs
from hybrid_jax.run.config import (config_diff, config_from_values, load_config, merge_config,
                                   read_config_json)
from hybrid_jax.run.errors import RunDirBusy, RunDirError
from hybrid_jax.run.files import FileLock, atomic_write_bytes, atomic_write_text
from hybrid_jax.run.label import architecture_label
from hybrid_jax.run.rundir import RunDir
