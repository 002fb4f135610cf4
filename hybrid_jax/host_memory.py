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
run before JAX starts its threads: a thread keeps the arena it first allocated from.
"""

import ctypes
import ctypes.util
import os

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
  return _applied
