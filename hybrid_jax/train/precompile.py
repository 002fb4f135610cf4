"""A CPU run's first programs (the state's init and the train step), compiled in a short-lived
child process that fills the persistent compilation cache, so that the training process loads
them from there instead of compiling them itself.

Why: on XLA:CPU a process that has compiled a program before its train step first runs runs
that step slower than a process that loaded it from the cache: 1.38-1.45x at the four toy
shapes, 1.02-1.08x at the d_model 256 ones (``hybrid-jax bench train --cold``, one run on a
2-core host). The cause inside XLA is not pinned down (a slow process holds the compiler's
thread pools, and its XLA threads switch context ~4x as often); a child that compiles needs
no knowledge of it. The training process then computes the same program, so losses are
unchanged. Cost: one more process start, 3-6 s on 2 cores, also when the cache already
holds the programs (telling that apart needs JAX's internal cache keys). Timed by hand at the
toy default's first run (no committed benchmark runs the whole command): 52-55 ms a step
against 73-90 ms without the child.

Only where it can help: the CPU backend, one process (a multi-process job compiles its own
sharded program in each process), the persistent cache on (``hybrid-jax`` turns it on), and
``HYBRID_JAX_PRECOMPILE`` not ``0``. A child that fails costs nothing but its time: the
training process compiles as before.
"""

import json
import os
import subprocess
import sys

import jax

ENV = "HYBRID_JAX_PRECOMPILE"


def wanted() -> bool:
  """Whether a train command should compile its first programs in a child first."""
  from hybrid_jax.train import distributed
  if os.environ.get(ENV, "1") == "0" or distributed.requested():   # before any backend starts
    return False
  if not jax.config.jax_compilation_cache_dir or not jax.config.jax_enable_compilation_cache:
    return False
  return jax.default_backend() == "cpu" and jax.process_count() == 1


def in_child(cfg, timeout_s: float = 900.0) -> None:
  """Compile ``cfg``'s (resolved) init and train step in a child process, which writes them
  to the persistent cache. Its failure or timeout is ignored: the caller compiles them."""
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


def main() -> int:
  """The child: ``python -m hybrid_jax.train.precompile`` with a resolved config's JSON on
  stdin."""
  from hybrid_jax.resolve import resolve
  from hybrid_jax.run import config_from_values
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)   # store even fast ones
  compile_first_programs(resolve(config_from_values(json.load(sys.stdin))))
  return 0


if __name__ == "__main__":
  sys.exit(main())
