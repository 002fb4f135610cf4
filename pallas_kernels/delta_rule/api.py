"""Public entry point for the gated delta rule; models call only this."""

from pallas_kernels import dispatch
from pallas_kernels.delta_rule import pallas_gpu, pallas_tpu, reference, xla

IMPLEMENTATIONS = dispatch.IMPLEMENTATIONS
__all__ = ["IMPLEMENTATIONS", "gated_delta_rule"]
DEFAULT_CHUNK = {"xla": xla.DEFAULT_CHUNK, "pallas_tpu": pallas_tpu.DEFAULT_CHUNK,
                 "pallas_gpu": pallas_gpu.DEFAULT_CHUNK}
_PALLAS = {"pallas_tpu": pallas_tpu, "pallas_gpu": pallas_gpu}


def gated_delta_rule(q, k, v, g, beta, *, scale=None, initial_state=None,
                     implementation="auto", chunk_size: int | None = None, interpret=None):
  """S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, o_t = scale * q_t S_t,
  with flash-linear-attention's conventions: q, k [B, T, H, K]; v [B, T, H, V]; g, beta
  [B, T, H]; scale defaults to K**-0.5; initial_state [B, H, K, V].
  Returns (o [B, T, H, V], final_state [B, H, K, V] float32).
  ``implementation``, ``chunk_size`` and ``interpret`` as in ``linear_scan.api.simple_gla``."""
  dispatch.check_scan_shapes(q, k, v, g, initial_state, beta)
  dispatch.check_scan_dtypes(q, k, v, g, initial_state, beta)
  impl, interpret, chunk_size = dispatch.resolve_scan(implementation, interpret, chunk_size,
                                                      scale, DEFAULT_CHUNK)
  if impl == "reference":
    return reference.gated_delta_rule(q, k, v, g, beta, scale=scale, initial_state=initial_state)
  if impl == "xla":
    return xla.gated_delta_rule(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                                chunk_size=chunk_size)
  kernel = lambda q, k, v, g, beta, s0: _PALLAS[impl].gated_delta_rule(
      q, k, v, g, beta, scale=scale, initial_state=s0, chunk_size=chunk_size,
      interpret=interpret)
  return dispatch.per_device(kernel, q, k, v, g, beta, initial_state)
