"""The persistent XLA compilation cache every entry point shares (a leaf module).

Runs of one sweep, resumes and repeated commands compile the same programs; caching them
on disk saves that time. ``JAX_COMPILATION_CACHE_DIR`` overrides the location.
"""

import os
from pathlib import Path

DEFAULT_DIR = Path.home() / ".cache" / "hybrid_jax" / "xla"


def use_persistent_compilation_cache(directory=None):
  """Point JAX at the cache unless the environment already does; call before JAX starts."""
  os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(directory or DEFAULT_DIR))
