"""Public entry point for simple GLA; models call only this."""

from pallas_kernels.linear_scan import reference, xla

IMPLEMENTATIONS = ("auto", "reference", "xla")


def check_shapes(q, k, v, g, initial_state, beta=None):
  if q.ndim != 4 or k.shape != q.shape or v.ndim != 4 or v.shape[:3] != q.shape[:3]:
    raise ValueError(f"q, k must be [B, T, H, K] and v [B, T, H, V]; got {q.shape}, {k.shape}, {v.shape}")
  if g.shape != q.shape[:3]:
    raise ValueError(f"g must be [B, T, H] = {q.shape[:3]}; got {g.shape}")
  if beta is not None and beta.shape != q.shape[:3]:
    raise ValueError(f"beta must be [B, T, H] = {q.shape[:3]}; got {beta.shape}")
  want = (q.shape[0], q.shape[2], q.shape[3], v.shape[3])
  if initial_state is not None and initial_state.shape != want:
    raise ValueError(f"initial_state must be [B, H, K, V] = {want}; got {initial_state.shape}")


def simple_gla(q, k, v, g, *, scale=None, initial_state=None, implementation="auto",
               chunk_size: int = xla.DEFAULT_CHUNK):
  """S_t = exp(g_t) S_{t-1} + k_t v_t^T, o_t = scale * q_t S_t (flash-linear-attention's
  conventions). q, k [B, T, H, K]; v [B, T, H, V]; g [B, T, H]; scale defaults to K**-0.5;
  initial_state [B, H, K, V]. Returns (o [B, T, H, V], final_state [B, H, K, V] float32)."""
  check_shapes(q, k, v, g, initial_state)
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}; got {implementation!r}")
  if implementation == "reference":
    return reference.simple_gla(q, k, v, g, scale=scale, initial_state=initial_state)
  return xla.simple_gla(q, k, v, g, scale=scale, initial_state=initial_state, chunk_size=chunk_size)
