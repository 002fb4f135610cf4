"""Gated delta rule on GPU: WY factors in XLA (``pallas_factors``), the chunk-sequential
state scan (u = u~ - W S, o, S') and its reverse-chunk backward in the Triton kernels shared
with simple GLA (``linear_scan.pallas_gpu``); K, V and the chunk padded to powers of 2 >= 16."""


from pallas_kernels.delta_rule.pallas_factors import kernel_factors
from pallas_kernels.linear_scan import pallas_gpu, state_scan
from pallas_kernels.linear_scan.pallas_gpu import pad_last, pad_state, pow2_at_least_16

DEFAULT_CHUNK = 64


def gated_delta_rule(q, k, v, g, beta, *, scale=None, initial_state=None,
                     chunk_size=DEFAULT_CHUNK, interpret=False):
  t, dk, dv, scale, s0 = state_scan.entry_shapes(q, v, scale, initial_state)
  chunk = pallas_gpu.gpu_chunk(chunk_size, t)
  kp, vp = pow2_at_least_16(dk), pow2_at_least_16(dv)
  qd, kd, w, ut, aqk, gam = kernel_factors(q, k, v, g, beta, scale, chunk, False)
  qd, kd, w, ut = pad_last(qd, kp), pad_last(kd, kp), pad_last(w, kp), pad_last(ut, vp)
  o, s_final = state_scan.state_scan(pallas_gpu.kernels(interpret), chunk, qd, kd, w, ut, aqk,
                                     gam, pad_state(s0, kp, vp))
  return state_scan.from_kernel_layout(o[..., :dv], t, q.dtype), s_final[:, :, :dk, :dv]
