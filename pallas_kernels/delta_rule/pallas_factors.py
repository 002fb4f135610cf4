"""The WY factors of the gated delta rule in the layout of the shared state-scan kernels
(``linear_scan.state_scan``): XLA, parallel over chunks, differentiated by JAX."""

import functools

import jax
import jax.numpy as jnp

from pallas_kernels.delta_rule import xla


@functools.partial(jax.checkpoint, static_argnums=(5, 6, 7))
def kernel_factors(q, k, v, g, beta, scale, chunk, gamma_per_chunk):
  """(qd, kd, w, ut, aqk, gam), each [B, H, N*C, X] float32, with the scale folded into qd
  and aqk; gam [B, H, N, 1, 1] with ``gamma_per_chunk`` (the TPU kernels). (I + A)^-1 by
  forward substitution: the product form prod_j (I + (-A)^(2^j)) is all matmuls but cancels
  powers of A that grow to ~1e8 when keys are correlated (repeated tokens), which float32
  cannot carry."""
  ut, w, aqk, qd, kd, b_last = xla.wy_factors(q, k, v, g, beta, chunk)
  n, b, h, c = aqk.shape[:4]
  layout = lambda x_NxBxHxCxX: jnp.moveaxis(x_NxBxHxCxX, 0, 2).reshape(b, h, n * c, -1)
  if gamma_per_chunk:
    gam = jnp.moveaxis(jnp.exp(b_last), 0, 2)[..., None, None]
  else:
    gam = layout(jnp.broadcast_to(jnp.exp(b_last)[..., None], (n, b, h, c))[..., None])
  return (layout(scale * qd), layout(kd), layout(w), layout(ut), layout(scale * aqk), gam)
