"""Gated delta rule on TPU: WY factors in XLA (``pallas_factors``), the chunk-sequential
state scan (u = u~ - W S, o, S') and its reverse-chunk backward in the Mosaic kernels shared
with simple GLA (``linear_scan.pallas_tpu``)."""


from pallas_kernels.delta_rule.pallas_factors import kernel_factors
from pallas_kernels.linear_scan import pallas_tpu, state_scan

DEFAULT_CHUNK = 128


def gated_delta_rule(q, k, v, g, beta, *, scale=None, initial_state=None,
                     chunk_size=DEFAULT_CHUNK, interpret=False):
  t, _, _, scale, s0 = state_scan.entry_shapes(q, v, scale, initial_state)
  chunk = pallas_tpu.tpu_chunk(chunk_size, t)
  qd, kd, w, ut, aqk, gam = kernel_factors(q, k, v, g, beta, scale, chunk, True)
  o, s_final = state_scan.state_scan(pallas_tpu.kernels(interpret, q.dtype), chunk, qd, kd, w,
                                     ut, aqk, gam, s0)
  return state_scan.from_kernel_layout(o, t, q.dtype), s_final
