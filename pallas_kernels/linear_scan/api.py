"""Public entry point for simple GLA; models call only this."""

from pallas_kernels import dispatch
from pallas_kernels.linear_scan import pallas_gpu, pallas_tpu, reference, xla

IMPLEMENTATIONS = dispatch.IMPLEMENTATIONS
DEFAULT_CHUNK = {"xla": xla.DEFAULT_CHUNK, "pallas_tpu": pallas_tpu.DEFAULT_CHUNK,
                 "pallas_gpu": pallas_gpu.DEFAULT_CHUNK}
_PALLAS = {"pallas_tpu": pallas_tpu, "pallas_gpu": pallas_gpu}


def simple_gla(q, k, v, g, *, scale=None, initial_state=None, implementation="auto",
               chunk_size: int | None = None, interpret=None):
  """S_t = exp(g_t) S_{t-1} + k_t v_t^T, o_t = scale * q_t S_t (flash-linear-attention's
  conventions). q, k [B, T, H, K]; v [B, T, H, V]; g [B, T, H]; scale defaults to K**-0.5;
  initial_state [B, H, K, V]. Returns (o [B, T, H, V], final_state [B, H, K, V] float32).

  ``implementation``: one of IMPLEMENTATIONS ("auto": the Pallas kernel of the target
  platform, XLA for CPU; see ``pallas_kernels.dispatch``); ``chunk_size`` None = that
  implementation's default; ``interpret`` as in ``dispatch.resolve`` (or a
  ``pltpu.InterpretParams`` for pallas_tpu). Pallas paths run per device under a mesh in
  context (``dispatch.per_device``)."""
  dispatch.check_scan_shapes(q, k, v, g, initial_state)
  dispatch.check_scan_dtypes(q, k, v, g, initial_state)
  impl, interpret, chunk_size = dispatch.resolve_scan(implementation, interpret, chunk_size,
                                                      scale, DEFAULT_CHUNK)
  if impl == "reference":
    return reference.simple_gla(q, k, v, g, scale=scale, initial_state=initial_state)
  if impl == "xla":
    return xla.simple_gla(q, k, v, g, scale=scale, initial_state=initial_state,
                          chunk_size=chunk_size)
  kernel = lambda q, k, v, g, s0: _PALLAS[impl].simple_gla(
      q, k, v, g, scale=scale, initial_state=s0, chunk_size=chunk_size, interpret=interpret)
  return dispatch.per_device(kernel, q, k, v, g, initial_state)
