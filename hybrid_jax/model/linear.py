"""Bias-free dense layers whose CPU backward takes XLA:CPU's fast dot form.

The weight gradient x^T dy contracts the tokens, the leading axis of x; XLA:CPU runs that
dot as an Eigen contraction, slow at the toy widths. ``dot_general`` hands a plain
[..., D_in] x [D_in, D_out] product to ``pallas_kernels.cpu_matmul.matmul``, whose backward
moves x^T behind a barrier so that both cotangent dots take the fast form. Whole two-thread
train steps compiled in the timing process (in-process A/Bs, losses identical): toy 1.07x,
toy-B4 1.06-1.08x, MF 1.07x, GF 1.04x, d256 even; in cache-loaded workers (``hybrid-jax
bench train --plain-dots``, every matmul's form together) the gain is 0-6% (docs/model.md).
Anything else (another target, batch dims, precision, an output sharding) is
``jax.lax.dot_general`` itself.
"""

import jax
import jax.numpy as jnp

from hybrid_jax.flax_nnx import nnx
from pallas_kernels import cpu_matmul


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                out_sharding=None):
  """``jax.lax.dot_general``'s signature, as ``nnx.Linear`` calls it."""
  (contract_l, contract_r), (batch_l, batch_r) = dimension_numbers
  plain = (tuple(contract_l) == (lhs.ndim - 1,) and tuple(contract_r) == (0,)
           and rhs.ndim == 2 and not batch_l and not batch_r and precision is None
           and out_sharding is None and cpu_matmul.fast_form())
  if not plain:
    return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                               preferred_element_type=preferred_element_type,
                               out_sharding=out_sharding)
  out_NxO = cpu_matmul.matmul(lhs.reshape(-1, lhs.shape[-1]), rhs)
  out_dtype = preferred_element_type or jnp.result_type(lhs.dtype, rhs.dtype)
  return out_NxO.reshape(lhs.shape[:-1] + rhs.shape[1:]).astype(out_dtype)


def linear(d_in: int, d_out: int, *, dtype, rngs: nnx.Rngs) -> nnx.Linear:
  """``nnx.Linear`` without bias, through ``dot_general``."""
  return nnx.Linear(d_in, d_out, use_bias=False, dtype=dtype, dot_general=dot_general,
                    rngs=rngs)
