"""The one timing helper and the one peak-FLOP probe of the benchmarks."""

import statistics
import time

import jax
import jax.numpy as jnp


def wall_times(call, reps: int, warmup: int = 1) -> list[float]:
  """Wall seconds of ``reps`` calls of ``call()`` (each waited for with block_until_ready),
  after ``warmup`` calls that compile and fill caches."""
  for _ in range(warmup):
    jax.block_until_ready(call())
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(call())
    times.append(time.perf_counter() - t0)
  return times


def best_seconds(fn, *args, reps: int = 2) -> float:
  """Best wall time of ``fn(*args)``: the kernel figure least disturbed by other work."""
  return min(wall_times(lambda: fn(*args), reps))


def median_seconds(call, reps: int, warmup: int = 1) -> float:
  """Median wall time of ``call()``: robust to the noise of a shared machine."""
  return statistics.median(wall_times(call, reps, warmup))


def matmul_peak_flops(n: int = 2048, reps: int = 10) -> float:
  """fp32 matmul rate of this machine (FLOP/s): the denominator of MFU."""
  a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
  b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
  f = jax.jit(lambda a, b: a @ b)
  return 2 * n ** 3 / best_seconds(f, a, b, reps=reps)
