"""Public entry point for the gated delta rule; models call only this."""

from pallas_kernels.delta_rule import reference, xla
from pallas_kernels.linear_scan.api import check_shapes

IMPLEMENTATIONS = ("auto", "reference", "xla")


def gated_delta_rule(q, k, v, g, beta, *, scale=None, initial_state=None,
                     implementation="auto", chunk_size: int = xla.DEFAULT_CHUNK):
  """S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, o_t = scale * q_t S_t,
  with flash-linear-attention's conventions: q, k [B, T, H, K]; v [B, T, H, V]; g, beta
  [B, T, H]; scale defaults to K**-0.5; initial_state [B, H, K, V].
  Returns (o [B, T, H, V], final_state [B, H, K, V] float32)."""
  check_shapes(q, k, v, g, initial_state, beta)
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}; got {implementation!r}")
  if implementation == "reference":
    return reference.gated_delta_rule(q, k, v, g, beta, scale=scale, initial_state=initial_state)
  return xla.gated_delta_rule(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                              chunk_size=chunk_size)
