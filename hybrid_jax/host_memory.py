"""Keep XLA:CPU's per-step buffers in the heap instead of fresh pages (a leaf module).

XLA:CPU allocates a step's temporaries (one arena, ~100 MB at the toy shape) with
``posix_memalign`` from an XLA worker thread. glibc serves a request that large from a
thread arena by ``mmap`` and unmaps it on free, so every step touches every page of it
anew: 26K page faults and a third of the toy step's time went to the kernel zeroing pages.
One malloc arena with mmap off and no trimming makes the freed block the next step's,
faults go to zero. Memory stays at its peak instead of returning to the OS, which a
training process reaches anyway. Only glibc has ``mallopt``; elsewhere this does nothing.
``HYBRID_JAX_MALLOC=system`` leaves malloc as it is.

The price of one arena: XLA:CPU's pool threads share its lock for their ~5,000 mallocs a toy
step, which is cheap in a fresh heap and not in one a compile has left fragmented (``perf``:
13% of a toy step's samples in ``_int_malloc`` against 0.8%). That is why a CPU train
command compiles its first programs in a child (``hybrid_jax.train.precompile``). This must
run before JAX starts its threads: a thread keeps the arena it first allocated from. Where
JAX's threads already run when ``hybrid_jax`` is imported (a notebook that ran a JAX op
first), the step's temporaries are mapped afresh every step (toy step 65-72 ms against
40-42 ms, timed by hand), so the import says so in one warning.
"""

import ctypes
import ctypes.util
import os
import sys
import warnings

_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8
_applied = None


def keep_buffers_in_heap() -> bool:
  """Tune glibc malloc once per process (before JAX starts its threads); True if applied."""
  global _applied
  if _applied is not None:
    return _applied
  _applied = False
  if os.environ.get("HYBRID_JAX_MALLOC", "") == "system":
    return _applied
  try:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    mallopt = libc.mallopt
  except (OSError, AttributeError):
    return _applied
  mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
  _applied = bool(mallopt(_M_ARENA_MAX, 1) and mallopt(_M_MMAP_MAX, 0)
                  and mallopt(_M_TRIM_THRESHOLD, 2 ** 31 - 1))
  if _applied and jax_threads_started():
    warnings.warn("hybrid_jax was imported after JAX started its CPU threads, which keep malloc "
                  "arenas of their own: each train step maps its buffers afresh (~1.6x slower "
                  "at the toy shapes); import hybrid_jax before running any JAX op",
                  RuntimeWarning, stacklevel=3)
  return _applied


def jax_threads_started() -> bool:
  """Whether JAX's CPU client already runs its thread pools (threads named ``tf_*``)."""
  if "jax" not in sys.modules or not os.path.isdir("/proc/self/task"):
    return False
  for tid in os.listdir("/proc/self/task"):
    try:
      with open(f"/proc/self/task/{tid}/comm") as f:
        if f.read().startswith("tf_"):
          return True
    except OSError:                          # the thread ended meanwhile
      pass
  return False
