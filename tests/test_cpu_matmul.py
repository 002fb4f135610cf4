"""pallas_kernels.cpu_matmul: the same products and gradients as einsum, in the form
XLA:CPU's fast dot kernel takes, and plain dots when compiled for GPU or TPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cpu_dot_forms import dots, slow_form_dots
from pallas_kernels import cpu_matmul, dispatch

# (op, einsum of the same product, shapes of a and b)
OPS = [(cpu_matmul.matmul, "...mk,...kn->...mn", (5, 7), (7, 3)),
       (cpu_matmul.matmul_nt, "...mk,...nk->...mn", (5, 7), (3, 7)),
       (cpu_matmul.matmul_tn, "...km,...kn->...mn", (7, 5), (7, 3))]


def _operands(shape_a, shape_b, batch):
  ka, kb = jax.random.split(jax.random.PRNGKey(0))
  return (jax.random.normal(ka, batch + shape_a), jax.random.normal(kb, batch + shape_b))


@pytest.mark.parametrize("batch", [(), (4,), (2, 3, 2)])
@pytest.mark.parametrize("op,spec,shape_a,shape_b", OPS)
def test_products_and_gradients_equal_einsums(op, spec, shape_a, shape_b, batch):
  a, b = _operands(shape_a, shape_b, batch)
  w = jax.random.normal(jax.random.PRNGKey(1), jnp.einsum(spec, a, b).shape)
  loss = lambda f: lambda a, b: jnp.sum(f(a, b) * w)
  want = jax.value_and_grad(loss(lambda a, b: jnp.einsum(spec, a, b)), argnums=(0, 1))(a, b)
  got = jax.jit(jax.value_and_grad(loss(op), argnums=(0, 1)))(a, b)
  for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,spec,shape_a,shape_b", OPS)
def test_cpu_program_has_only_fast_form_dots(op, spec, shape_a, shape_b):
  """Forward and both cotangents contract the left operand's last axis; the einsum's own
  gradient program has at least one dot that does not (so the check reads the HLO)."""
  a, b = _operands((64, 48), (48, 32) if op is cpu_matmul.matmul else
                   (32, 48) if op is cpu_matmul.matmul_nt else (64, 32), (8,))
  hlo = lambda f: jax.jit(jax.grad(lambda a, b: jnp.sum(f(a, b) ** 2), argnums=(0, 1))).lower(
      a, b).compile().as_text()
  assert len(dots(hlo(op))) == 3
  assert not slow_form_dots(hlo(op)), slow_form_dots(hlo(op))
  assert slow_form_dots(hlo(lambda a, b: jnp.einsum(spec, a, b)))


@pytest.mark.parametrize("platform", ["gpu", "tpu"])
def test_plain_dots_without_barriers_for_accelerators(platform):
  a, b = _operands((5, 7), (7, 3), (2,))
  with dispatch.compile_for(platform):
    jaxpr = str(jax.make_jaxpr(jax.grad(
        lambda a, b: jnp.sum(cpu_matmul.matmul_tn(jnp.swapaxes(a, -1, -2), b)
                             + cpu_matmul.matmul(a, b) ** 2), argnums=(0, 1)))(a, b))
  assert "optimization_barrier" not in jaxpr and "custom_vjp" not in jaxpr
  assert "optimization_barrier" in str(jax.make_jaxpr(jax.grad(
      lambda a, b: jnp.sum(cpu_matmul.matmul(a, b) ** 2), argnums=(0, 1)))(a, b))


def test_switched_off_the_ops_are_plain_dots():
  """``set_fast_form(False)`` (the bench's ``--plain-dots`` baseline): the einsum's own
  program, slow form included."""
  a, b = _operands((64, 48), (48, 32), (8,))
  grad = lambda: jax.jit(jax.grad(lambda a, b: jnp.sum(cpu_matmul.matmul(a, b) ** 2),
                                  argnums=(0, 1))).lower(a, b).compile().as_text()
  cpu_matmul.set_fast_form(False)
  try:
    assert not cpu_matmul.fast_form()
    assert slow_form_dots(grad())
  finally:
    cpu_matmul.set_fast_form(True)
  assert cpu_matmul.fast_form() and not slow_form_dots(grad())
