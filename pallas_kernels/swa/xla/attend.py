"""Masked softmax attention over leading batch axes, forward and hand-written backward: the
arithmetic every variant (``banded``, ``strips``, ``folded``) applies to its blocks."""

import jax
import jax.numpy as jnp

from pallas_kernels import cpu_matmul


def attend_forward(q_QxGxD, k_LxD, v_LxD, mask_QxL, scale, keep=False):
  """Masked softmax attention over leading batch axes: q [..., Q, G, D], k/v [..., L, D],
  mask [..., Q, L]. Returns the float32 output and the row log-sum-exp [..., Q, G]; with
  ``keep``, also the unnormalised probabilities and the rows' 1 / sum (for
  ``attend_backward_kept``)."""
  s = jnp.einsum("...qgd,...ld->...qgl", q_QxGxD, k_LxD, preferred_element_type=jnp.float32)
  s = jnp.where(mask_QxL[..., :, None, :], s * scale, -jnp.inf)
  m = jnp.max(s, axis=-1, keepdims=True)
  m = jnp.where(jnp.isfinite(m), m, 0.0)     # a query that sees no key (padding rows)
  p = jnp.exp(s - m)
  l = jnp.maximum(jnp.sum(p, axis=-1, keepdims=True), 1e-30)
  o = jnp.einsum("...qgl,...ld->...qgd", p.astype(v_LxD.dtype), v_LxD,
                 preferred_element_type=jnp.float32) / l
  lse = (m + jnp.log(l))[..., 0]
  return (o, lse, (p, 1.0 / l)) if keep else (o, lse)


def attend_backward(q, k, v, mask, o, lse, do, scale):
  """Flash-style gradients of ``attend_forward`` (float32): the probabilities are recomputed
  with one fused exp from the row log-sum-exp, and the softmax gradient's row term comes
  from dO . O instead of a reduction over the keys; this saves several full passes over the
  [Q, G, L] score tensor, which dominate on CPU."""
  do, o = do.astype(jnp.float32), o.astype(jnp.float32)
  s = jnp.einsum("...qgd,...ld->...qgl", q, k, preferred_element_type=jnp.float32)
  p = jnp.exp(jnp.where(mask[..., :, None, :], s * scale, -jnp.inf) - lse[..., None])
  dv = _contract_rows(p, do)
  dp = jnp.einsum("...qgd,...ld->...qgl", do, v.astype(jnp.float32))
  ds = p * (dp - jnp.sum(do * o, axis=-1, keepdims=True)) * scale
  dq = jnp.einsum("...qgl,...ld->...qgd", ds, k.astype(jnp.float32))
  dk = _contract_rows(ds, q.astype(jnp.float32))
  return dq, dk, dv


def _contract_rows(p_QxGxL, x_QxGxD):
  """sum over (q, g) of p[q, g, l] x[q, g, d]: [..., L, D], the dV / dK matmul.
  The query and group axes are merged into one [Q*G] axis first (a free reshape): contracted
  as two axes, XLA:CPU copied the score-sized p transposed to [G, Q, L] before every such
  matmul. The product is formed as [D, L] and only that small result is transposed: p then
  enters in row-major [Q*G, L] order as the right operand ([L, D] directly made toy full
  attention, D 16, 1.12x slower). Against the two-axis form, fwd+bwd of the attention op
  (in-process A/B, min-time ratios): d256 1.13x (F) and 1.15x (S), toy 1.03x and 1.11x.

  On CPU the left operand x is also moved to [D, Q*G] (q-sized, ``cpu_matmul.matmul_tn``),
  and the [D, L] result stays apart from its transpose, each behind an optimization
  barrier: a batched matmul whose left operand contracts a leading axis went to Eigen at
  about a third of the rate of XLA:CPU's YNNPACK dot (d256's largest dK block, one core: 7.4
  against 3.1 ms), and without the barriers XLA folds both transposes back into the dot.
  Whole two-thread train steps compiled in the timing process (in-process A/B): d256 1.05x,
  toy 1.08x; in cache-loaded workers (``bench train --plain-dots``) much less (docs/model.md)."""
  rows = lambda x: x.reshape(x.shape[:-3] + (x.shape[-3] * x.shape[-2], x.shape[-1]))
  out_DxL = cpu_matmul.matmul_tn(rows(x_QxGxD), rows(p_QxGxL))
  if cpu_matmul.fast_form():
    out_DxL = jax.lax.optimization_barrier(out_DxL)
  return jnp.swapaxes(out_DxL, -1, -2)


def attend_backward_kept(q, k, v, p, inv_l, o, do, scale):
  """``attend_backward`` from the forward's kept probabilities ``p`` [..., Q, G, L]
  (unnormalised) and rows' ``inv_l`` [..., Q, G, 1]: no recomputed scores and no exp, the
  two score-sized passes the flash-style backward spends to save memory. The softmax is
  P = p * inv_l; inv_l is folded into dO for dV and into the scale for dS, so P itself is
  never formed."""
  do, o = do.astype(jnp.float32), o.astype(jnp.float32)
  dv = _contract_rows(p, do * inv_l)
  dp = jnp.einsum("...qgd,...ld->...qgl", do, v.astype(jnp.float32))
  ds = p * (dp - jnp.sum(do * o, axis=-1, keepdims=True)) * (inv_l * scale)
  dq = jnp.einsum("...qgl,...ld->...qgd", ds, k.astype(jnp.float32))
  dk = _contract_rows(ds, q.astype(jnp.float32))
  return dq, dk, dv
