import os

import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# numpy's OpenBLAS with one thread, as ``import hybrid_jax`` sets it (hybrid_jax.blas_threads),
# here before pytest's plugins import numpy: two test workers share the cores, and spinning
# BLAS threads made the scaling fits' tests ~9x slower.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# One persistent XLA cache for the whole test session (subprocesses inherit it): the same
# tiny programs are compiled once, not once per process.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", tempfile.mkdtemp(prefix="hybrid_jax_xla_"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# The suite compiles hundreds of small programs and runs each a few times: LLVM at -O0 halves
# the compile time (XLA's HLO passes still run; every tolerance holds). A set XLA_FLAGS wins.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
# Train commands compile their first programs in a child process only to run them faster
# (``hybrid_jax.train.precompile``); the suite's cache holds them already, so the child would
# only cost its start-up. tests/test_precompile.py turns it on.
os.environ.setdefault("HYBRID_JAX_PRECOMPILE", "0")

import pytest  # noqa: E402

from hybrid_jax.configs.base import base_config  # noqa: E402


def tiny_config_file(steps: int, checkpoint: str) -> str:
  """A config file of a tiny model for the tests that train through the CLI: ``steps``
  steps, logged every step; ``checkpoint``: the file's line setting the checkpoint section."""
  return f"""
from hybrid_jax.configs.base import base_config

def get_config():
  c = base_config()
  c.model.size = "custom"
  c.model.d_model, c.model.n_layers, c.model.n_heads, c.model.n_kv_heads = 32, 2, 4, 2
  c.model.window = 8
  c.data.seq_len, c.data.n_pairs = 48, 4
  c.train.batch_size, c.train.steps, c.train.warmup_steps, c.train.log_every = 4, {steps}, 2, 1
  {checkpoint}
  return c
"""


@pytest.fixture(scope="module")
def config_file(request, tmp_path_factory):
  """The using test module's ``CONFIG_FILE`` text (e.g. ``tiny_config_file``'s), as a file."""
  path = tmp_path_factory.mktemp("cfg") / "tiny.py"
  path.write_text(request.module.CONFIG_FILE)
  return path


def tiny_config(pattern="SF", steps=12, **model):
  """A model small enough to compile in seconds; every test that trains uses it."""
  c = base_config()
  c.model.size = "custom"
  c.model.pattern = pattern
  c.model.d_model, c.model.n_layers, c.model.n_heads, c.model.n_kv_heads = 32, 2, 4, 2
  c.model.window = 8
  c.model.ssm_head_dim, c.model.ssm_state, c.model.chunk_size = 16, 8, 16
  for k, v in model.items():
    c.model[k] = v
  c.data.seq_len = 48
  c.data.n_pairs = 4
  c.train.batch_size = 4
  c.train.steps = steps
  c.train.warmup_steps = 2
  c.train.log_every = 1
  c.checkpoint.every = 4
  return c


@pytest.fixture
def tiny():
  return tiny_config
