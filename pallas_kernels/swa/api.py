"""Public entry point for sliding-window attention; models call only this."""


from pallas_kernels.swa import reference, xla

IMPLEMENTATIONS = ("auto", "reference", "xla")


def _check(q, k, v, window):
  if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
    raise ValueError(f"q, k, v must be [B, T, H, D]; got {q.shape}, {k.shape}, {v.shape}")
  if k.shape != v.shape or k.shape[:2] != q.shape[:2] or k.shape[3] != q.shape[3]:
    raise ValueError(f"k and v must be [B, T, H_kv, D] matching q {q.shape}; got {k.shape}, {v.shape}")
  if q.shape[2] % k.shape[2]:
    raise ValueError(f"kv heads ({k.shape[2]}) must divide query heads ({q.shape[2]})")
  if int(window) < 1:
    raise ValueError(f"window must be >= 1; got {window}")


def sliding_window_attention(q, k, v, *, window: int, scale: float | None = None,
                             implementation: str = "auto", block_size: int | None = None):
  """Causal attention in which query i sees keys j with i - window < j <= i.

  q: [B, T, H, D]; k, v: [B, T, H_kv, D] with H_kv dividing H. ``window >= T`` is full
  causal attention. Returns [B, T, H, D] in q's dtype.
  ``implementation``: "reference" (dense masked, O(T^2)), "xla" (blockwise, O(T*w)) or
  "auto" (the best available on the current backend; XLA until Pallas kernels land).
  """
  _check(q, k, v, window)
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}; got {implementation!r}")
  if implementation == "reference":
    return reference.sliding_window_attention(q, k, v, window=window, scale=scale)
  return xla.sliding_window_attention(q, k, v, window=window, scale=scale, block_size=block_size)
