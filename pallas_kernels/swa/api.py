"""Public entry point for sliding-window attention; models call only this."""

import operator

from pallas_kernels import dispatch
from pallas_kernels.swa import pallas_gpu, pallas_tpu, reference, xla
from pallas_kernels.swa.common import BlockSizes  # noqa: F401  (the Pallas paths' per-phase blocks)

IMPLEMENTATIONS = dispatch.IMPLEMENTATIONS
_PALLAS = {"pallas_tpu": pallas_tpu, "pallas_gpu": pallas_gpu}


def _check(q, k, v, window):
  """Shape, dtype and window errors, raised at trace time before any compute."""
  if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
    raise ValueError(f"q, k, v must be [B, T, H, D]; got {q.shape}, {k.shape}, {v.shape}")
  if k.shape != v.shape or k.shape[:2] != q.shape[:2] or k.shape[3] != q.shape[3]:
    raise ValueError(f"k and v must be [B, T, H_kv, D] matching q {q.shape}; got {k.shape}, {v.shape}")
  if q.shape[2] % k.shape[2]:
    raise ValueError(f"kv heads ({k.shape[2]}) must divide query heads ({q.shape[2]})")
  if not (q.dtype == k.dtype == v.dtype):
    raise ValueError(f"q, k, v must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
  try:
    window = operator.index(window)
  except TypeError:
    raise ValueError(f"window must be an int; got {window!r}") from None
  if window < 1:
    raise ValueError(f"window must be >= 1; got {window}")
  return window


def sliding_window_attention(q, k, v, *, window: int, scale: float | None = None,
                             implementation: str = "auto",
                             block_size: "int | BlockSizes | None" = None, interpret=None):
  """Causal attention in which query i sees keys j with i - window < j <= i.

  q: [B, T, H, D]; k, v: [B, T, H_kv, D] with H_kv dividing H. ``window >= T`` is full
  causal attention. Returns [B, T, H, D] in q's dtype.
  ``implementation``: "reference" (dense masked, O(T^2)), "xla" (blockwise, O(T*w)),
  "pallas_tpu" / "pallas_gpu" (flash kernels, O(T*w)) or "auto" (see ``dispatch``: the kernel
  of the target platform, XLA for CPU; Pallas runs per device under a mesh in context). ``block_size``: query/key block of the
  blockwise paths (None: a per-backend default); the Pallas paths also take a ``BlockSizes``
  (forward, dQ, dK/dV), the XLA path its forward block. ``interpret``: for the Pallas paths, None
  (interpret exactly on CPU), a bool, or a ``pltpu.InterpretParams`` (pallas_tpu only).
  """
  window = _check(q, k, v, window)
  implementation, interpreted = dispatch.resolve(implementation, interpret)
  if implementation == "reference":
    return reference.sliding_window_attention(q, k, v, window=window, scale=scale)
  if implementation == "xla":
    xla_block = block_size.fwd if isinstance(block_size, BlockSizes) else block_size
    return xla.sliding_window_attention(q, k, v, window=window, scale=scale, block_size=xla_block)
  kernel = lambda q, k, v: _PALLAS[implementation].sliding_window_attention(
      q, k, v, window=window, scale=scale, block_size=block_size, interpret=interpreted)
  return dispatch.per_device(kernel, q, k, v)
