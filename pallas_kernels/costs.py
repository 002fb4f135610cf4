"""``pl.CostEstimate``s of the Pallas kernels, so that the compiler's FLOP count of a step
(``compiled.cost_analysis()``) includes the attention and scan work a custom call hides.

Counted as a model count (the MFU convention): the forward's matmuls at 2 FLOPs per
multiply-add, and a backward of twice the forward; work a kernel recomputes (the flash
backward's scores, the scan backward's factors) is not counted. Bytes are each operand and
result read or written once.
"""

import math

import numpy as np
from jax.experimental import pallas as pl


def nbytes(*arrays) -> int:
  """Bytes of arrays or ShapeDtypeStructs (None skipped)."""
  return sum(math.prod(a.shape) * np.dtype(a.dtype).itemsize for a in arrays if a is not None)


def estimate(flops, transcendentals, operands, results) -> pl.CostEstimate:
  return pl.CostEstimate(flops=int(flops), transcendentals=int(transcendentals),
                         bytes_accessed=int(nbytes(*operands) + nbytes(*results)))


def band_pairs(t: int, window: int) -> int:
  """(query, key) pairs that causal attention with window ``window`` scores over T tokens:
  sum over i of min(window, i + 1)."""
  w = min(window, t)
  return w * (w + 1) // 2 + (t - w) * w


def attention_flops(batch, heads, t, window, head_dim, backward=False) -> int:
  """One kernel's model FLOPs. Forward: QK^T and PV over the band, 4 FLOPs per pair and head
  dim. Each of the two backward kernels (``backward=True``) as much again: dP and dQ in the
  dQ kernel, dK and dV in the dK/dV kernel (the backward is twice the forward)."""
  return 4 * batch * heads * band_pairs(t, window) * head_dim


def scan_flops(batch, heads, t_padded, chunk, dk, dv, delta_rule: bool) -> int:
  """Forward of the chunked scan over T (padded) tokens: per chunk of C, q k^T (2 C^2 K, fused
  simple GLA only), o = Qd S + Aqk u (2 C K V + 2 C^2 V), S' += Kd^T u (2 C K V) and, for the
  delta rule, u = u~ - W S (2 C K V)."""
  per_chunk = 2 * chunk * chunk * dv + 4 * chunk * dk * dv
  per_chunk += 2 * chunk * dk * dv if delta_rule else 2 * chunk * chunk * dk
  return batch * heads * (t_padded // chunk) * per_chunk
