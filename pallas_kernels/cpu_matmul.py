"""Batched matmuls that stay in XLA:CPU's fast form, forward and backward.

XLA:CPU gives a dot to its fast kernel (YNNPACK) when the left operand contracts its last
axis; a dot whose left operand contracts a leading axis (a^T b, and the weight-side
cotangent of every a @ b that autodiff writes) runs as a batched Eigen contraction, at about
a third of the rate at the recurrent mixers' chunk shapes. XLA folds a plain transpose back
into the dot, so the transposed operand is materialised behind an optimization barrier, and
each op's VJP is written out so that its cotangents take the same form.

On GPU and TPU (``dispatch.target_platform``) these are plain ``dot_general``s: there the
XLA paths are the kernels' baselines and the barriers would only stop fusion. ``fast_form``
is the one switch every user of the form reads (``hybrid-jax bench train --plain-dots``
turns it off in a worker, to time the step with XLA's own dot forms in the same run).

Shapes: leading axes are batch axes, shared by both operands; the last two are matrices.
"""

import jax
import jax.numpy as jnp

from pallas_kernels import dispatch


_enabled = True


def fast_form() -> bool:
  """Whether matmuls are traced in the fast form: on for a CPU target."""
  return _enabled and dispatch.target_platform() == "cpu"


def set_fast_form(enabled: bool) -> None:
  """Off: every op here is a plain ``dot_general`` (the bench's baseline; a process-wide
  switch read at trace time)."""
  global _enabled
  _enabled = enabled


def _dot(a, b, contract_a: int, contract_b: int):
  batch = tuple(range(a.ndim - 2))
  return jax.lax.dot_general(a, b, (((contract_a,), (contract_b,)), (batch, batch)),
                             preferred_element_type=jnp.float32)


def _nn(a, b):           # a [..., M, K] @ b [..., K, N]
  return _dot(a, b, a.ndim - 1, b.ndim - 2)


def _nt(a, b):           # a [..., M, K] @ b[..., N, K]^T
  return _dot(a, b, a.ndim - 1, b.ndim - 1)


def _moved_t(x):
  """x^T materialised: the barrier keeps XLA from folding the transpose into the dot."""
  return jax.lax.optimization_barrier(jnp.swapaxes(x, -1, -2))


def _with_cotangents(forward, cotangents):
  """``forward(a, b)`` under a custom VJP whose cotangents are ``cotangents(a, b, g)``."""
  f = jax.custom_vjp(forward)
  f.defvjp(lambda a, b: (forward(a, b), (a, b)),
           lambda res, g: tuple(c.astype(x.dtype) for c, x in zip(cotangents(*res, g), res)))
  return f


# d(a b) = g b^T, a^T g;  d(a b^T) = g b, g^T a;  d(a^T b) = b g^T, a g
_matmul_cpu = _with_cotangents(_nn, lambda a, b, g: (_nt(g, b), _nn(_moved_t(a), g)))
_matmul_nt_cpu = _with_cotangents(_nt, lambda a, b, g: (_nn(g, b), _nn(_moved_t(g), a)))
_matmul_tn_cpu = _with_cotangents(lambda a, b: _nn(_moved_t(a), b),
                                  lambda a, b, g: (_nt(b, g), _nn(a, g)))


def matmul(a, b):
  """a @ b: [..., M, K] x [..., K, N] -> [..., M, N] (float32 accumulation)."""
  return _matmul_cpu(a, b) if fast_form() else _nn(a, b)


def matmul_nt(a, b):
  """a @ b^T: [..., M, K] x [..., N, K] -> [..., M, N]."""
  return _matmul_nt_cpu(a, b) if fast_form() else _nt(a, b)


def matmul_tn(a, b):
  """a^T @ b: [..., K, M] x [..., K, N] -> [..., M, N]."""
  if fast_form():
    return _matmul_tn_cpu(a, b)
  return _dot(a, b, a.ndim - 2, b.ndim - 2)
