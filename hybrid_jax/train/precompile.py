"""A CPU run's first programs (the state's init and the train step), compiled in a short-lived
child process that fills the persistent compilation cache, so that the training process loads
them from there instead of compiling them itself.

Why: on XLA:CPU a process that has compiled a program before its train step first runs runs
that step slower than a process that loaded it from the cache: 1.38-1.45x at the four toy
shapes, 1.02-1.08x at the d_model 256 ones (``hybrid-jax bench train --cold``, one run on a
2-core host). The cause is the C heap, not XLA's code: ``hybrid_jax.host_memory`` puts every
thread on glibc's one main malloc arena (so that the step's ~100 MB of temporaries are reused
instead of mapped afresh), and compiling leaves that arena full of scattered free chunks.
XLA:CPU's two pool threads then make ~5,000 mallocs a step into it under one lock: ``perf``
put 13% of a slow toy process's samples in glibc's ``_int_malloc`` (0.8% in a loaded one) and
8% in the kernel (3%), mostly lock waits, hence the pool threads' extra context switches. A
child's heap dies with it. The training process then computes the same program, so losses
are unchanged. Timed by hand at the toy default's first run (no committed benchmark runs the
whole command): 52-55 ms a step against 73-90 ms without the child.

Cost: one more process start, 3-6 s on 2 cores. A child that compiled writes a receipt
beside the cache (``receipt``): the cache keys of its programs, filed under a digest of
everything that shapes them (the resolved config less its seeds, the project's source, the
JAX version and flags, the host). A later command whose receipt is there and whose cache
entries still exist (a rerun, a resume, another seed) starts no child. A receipt that is
wrong costs only speed: the training process then compiles what it lacks, as without the
child.

Only where it can help: the CPU backend, one process (a multi-process job compiles its own
sharded program in each process; its processes are single-threaded, and a cold one measured
as fast as a loaded one), the persistent cache on (``hybrid-jax`` turns it on), and
``HYBRID_JAX_PRECOMPILE`` not ``0``. A child that fails costs nothing but its time: the
training process compiles as before.
"""

import hashlib
import json
import logging
import os
import platform
import subprocess
import sys
from pathlib import Path

import jax
import jaxlib

from hybrid_jax.configs import require_resolved

ENV = "HYBRID_JAX_PRECOMPILE"
PROGRAMS = ("jit_init", "jit_train_step")
_SOURCES = ("hybrid_jax", "pallas_kernels")    # the packages whose code the programs trace


def wanted() -> bool:
  """Whether a train command should compile its first programs in a child first."""
  from hybrid_jax.train import distributed
  if os.environ.get(ENV, "1") == "0" or distributed.requested():   # before any backend starts
    return False
  if not jax.config.jax_compilation_cache_dir or not jax.config.jax_enable_compilation_cache:
    return False
  return jax.default_backend() == "cpu" and jax.process_count() == 1


def receipt(cfg) -> Path:
  """Where a child records the cache keys of ``cfg``'s first programs: a file named by a
  digest of what shapes those programs (any change makes a new name, so a stale receipt is
  never read). Seeds no compiled program holds are left out, so a seed sweep's runs share
  one receipt: the data's (host-side batches) and the init's when the init program takes it
  as an argument (``train.state.seed_argument``; a seed outside int32 is a constant in it)."""
  from hybrid_jax.train.state import seed_argument   # lazy: it imports flax
  values = json.loads(cfg.to_json())
  values["data"].pop("seed", None)
  if seed_argument(cfg.train.seed):
    values["train"].pop("seed", None)
  h = hashlib.sha256()
  h.update(json.dumps(values, sort_keys=True).encode())
  root = Path(__file__).resolve().parents[2]
  for package in _SOURCES:
    for path in sorted((root / package).rglob("*.py")):
      h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
  env = sorted((k, v) for k, v in os.environ.items() if k.startswith(("JAX_", "XLA_"))
               and k not in ("JAX_LOG_COMPILES", "JAX_COMPILATION_CACHE_DIR"))
  h.update(repr((jax.__version__, jaxlib.__version__, sys.version, platform.node(),
                 platform.machine(), env)).encode())
  return Path(jax.config.jax_compilation_cache_dir) / "hybrid_jax_precompiled" / h.hexdigest()


def cached(cfg) -> bool:
  """Whether a child already compiled ``cfg``'s first programs and the cache still holds
  them (the cache evicts entries when it outgrows its size limit)."""
  try:
    keys = json.loads(receipt(cfg).read_text())["keys"]
  except (OSError, ValueError, KeyError, TypeError):
    return False
  return _all_in_cache(keys)


def _all_in_cache(keys: dict) -> bool:
  """Whether ``keys`` ({program: cache key}) name every first program and the persistent
  cache holds a file for each (JAX's file cache names it ``<key>-cache``)."""
  cache = Path(jax.config.jax_compilation_cache_dir)
  return set(keys) == set(PROGRAMS) and all((cache / f"{key}-cache").exists()
                                            for key in keys.values())


def first_step_note(cfg) -> str:
  """What happens before the first step, in one line: compiling (in a child, or here) or
  loading from the persistent cache, and the cache's path."""
  cache = jax.config.jax_compilation_cache_dir if jax.config.jax_enable_compilation_cache else None
  where = f"the compile cache {cache}" if cache else "no compile cache"
  if not cache:
    return f"compiling the train step on {jax.default_backend()} ({where})"
  if wanted() and cached(cfg):
    return f"loading the train step from {where}"
  if wanted():
    return f"compiling the train step into {where} (this shape's first run; later runs load it)"
  return f"compiling the train step on {jax.default_backend()}, or loading it from {where}"


def in_child(cfg, timeout_s: float = 900.0) -> None:
  """Compile ``cfg``'s (resolved) init and train step in a child process, which writes them
  to the persistent cache, unless a receipt says it is done (``cached``). The child gets
  the resolved config itself (its JSON, ``derived`` included) and does not resolve again.
  Its failure or timeout is ignored: the caller compiles them."""
  require_resolved(cfg, "precompile.in_child")
  if cached(cfg):
    return
  try:
    subprocess.run([sys.executable, "-m", "hybrid_jax.train.precompile"], input=cfg.to_json(),
                   capture_output=True, text=True, timeout=timeout_s)
  except subprocess.TimeoutExpired:
    pass


def compile_first_programs(cfg) -> None:
  """Compile (and with the persistent cache on, store) the programs a training process runs
  first, built by the loop's own functions: the state's init and the train step."""
  from hybrid_jax.data import make_source
  from hybrid_jax.train import loop, sharding
  from hybrid_jax.train.state import init_state
  mesh = sharding.make_mesh(cfg.mesh)
  graphdef, rest, state, tx, _ = init_state(cfg, mesh)
  step = loop.run_step(cfg, mesh, graphdef, rest, tx, sharding.state_shardings(mesh, state))
  local = make_source(cfg).batch(0, rows=sharding.process_rows(cfg.train.batch_size))
  step.lower(state, loop.step_batch(cfg, mesh, local)).compile()


class _CacheKeys(logging.Handler):
  """Collects the persistent cache's key of each program compiled or loaded, from JAX's
  own log records ("... cache hit/MISS for 'jit_x' with key 'jit_x-...'")."""

  def __init__(self):
    super().__init__(logging.DEBUG)
    self.keys = {}

  def emit(self, record):
    if "cache" in str(record.msg).lower() and len(record.args or ()) == 2:
      name, key = record.args
      if name in PROGRAMS and isinstance(key, str) and key.startswith(name):
        self.keys[name] = key


def main() -> int:
  """The child: ``python -m hybrid_jax.train.precompile`` with a resolved config's JSON on
  stdin, taken as it is (the parent resolved it). Writes the receipt once both programs are
  in the cache."""
  from hybrid_jax.resolve import resolved_from_json
  from hybrid_jax.run import atomic_write_text
  cfg = resolved_from_json(sys.stdin.read())
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)   # store even fast ones
  logger, keys = logging.getLogger("jax._src.compiler"), _CacheKeys()
  level = logger.level
  logger.addHandler(keys)
  logger.setLevel(logging.DEBUG)
  try:
    compile_first_programs(cfg)
  finally:
    logger.removeHandler(keys)
    logger.setLevel(level)
  if _all_in_cache(keys.keys):
    atomic_write_text(receipt(cfg), json.dumps(dict(keys=keys.keys)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
