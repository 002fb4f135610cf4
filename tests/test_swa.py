"""Blockwise SWA (XLA) against dense attention under an explicit band mask."""

import functools
import re

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from cpu_dot_forms import dots, slow_form_dots
from pallas_kernels.swa import api, reference, xla
from pallas_kernels.swa.xla import policy


def _qkv(b, t, h, kv, d, seed=0, dtype=jnp.float32):
  ks = jax.random.split(jax.random.PRNGKey(seed), 3)
  return (jax.random.normal(ks[0], (b, t, h, d), dtype),
          jax.random.normal(ks[1], (b, t, kv, d), dtype),
          jax.random.normal(ks[2], (b, t, kv, d), dtype))


def test_band_mask_semantics():
  m = np.asarray(reference.band_mask(6, 6, 3))
  for i in range(6):
    assert [j for j in range(6) if m[i, j]] == list(range(max(0, i - 2), i + 1))


@pytest.mark.parametrize("t,window,block,h,kv", [
    (40, 1, 8, 4, 2),      # w = 1
    (40, 5, 8, 4, 4),      # small window
    (40, 13, 8, 4, 2),     # w does not divide the block; spans two earlier blocks
    (37, 13, 16, 6, 1),    # T not a multiple of the block; MQA
    (40, 8, 8, 4, 2),      # w equal to the block
    (9, 4, 16, 4, 2),      # T smaller than one block
    (40, 40, None, 4, 2),  # w = T
    (40, 100, None, 6, 3), # w > T
    (48, 17, None, 4, 1),  # default block size
    (40, 40, 8, 4, 2),     # full causal, block skipping over 5 query blocks
    (37, 64, 16, 6, 3),    # full causal, T not a multiple of the block
])
def test_blockwise_matches_dense_forward_and_grads(t, window, block, h, kv):
  q, k, v = _qkv(2, t, h, kv, 8)
  dense = jax.jit(lambda q, k, v: reference.sliding_window_attention(q, k, v, window=window))
  block_fn = jax.jit(
      lambda q, k, v: xla.sliding_window_attention(q, k, v, window=window, block_size=block))
  np.testing.assert_allclose(block_fn(q, k, v), dense(q, k, v), rtol=1e-5, atol=1e-5)
  w = jax.random.normal(jax.random.PRNGKey(9), (2, t, h, 8))
  grads = lambda f: jax.jit(jax.grad(lambda q, k, v: jnp.sum(f(q, k, v) * w),
                                     argnums=(0, 1, 2)))(q, k, v)
  for g_block, g_dense in zip(grads(block_fn), grads(dense)):
    np.testing.assert_allclose(g_block, g_dense, rtol=1e-4, atol=1e-5)


def test_window_at_least_t_is_full_causal():
  q, k, v = _qkv(1, 16, 2, 2, 8)
  full = reference.sliding_window_attention(q, k, v, window=16)
  np.testing.assert_allclose(full, jax.nn.dot_product_attention(q, k, v, is_causal=True), atol=1e-6)
  np.testing.assert_allclose(api.sliding_window_attention(q, k, v, window=16), full, atol=1e-6)
  np.testing.assert_allclose(api.sliding_window_attention(q, k, v, window=99), full, atol=1e-6)
  # and a smaller window really is different
  assert not np.allclose(api.sliding_window_attention(q, k, v, window=4), full, atol=1e-3)


def test_window_one_returns_own_value():
  q, k, v = _qkv(1, 20, 4, 2, 8)
  out = api.sliding_window_attention(q, k, v, window=1)
  np.testing.assert_allclose(out, jnp.repeat(v, 2, axis=2), atol=1e-6)


def test_bfloat16_close_to_float32():
  q, k, v = _qkv(2, 64, 4, 2, 16)
  ref = reference.sliding_window_attention(q, k, v, window=10)
  out = api.sliding_window_attention(*(x.astype(jnp.bfloat16) for x in (q, k, v)), window=10)
  assert out.dtype == jnp.bfloat16
  np.testing.assert_allclose(out.astype(jnp.float32), ref, atol=5e-2, rtol=5e-2)


def test_blockwise_cost_is_linear_in_t():
  """The XLA path never forms a T x T score matrix: its largest intermediate grows ~T."""
  def biggest(t):
    q, k, v = _qkv(1, t, 2, 2, 8)
    jaxpr = jax.make_jaxpr(lambda q, k, v: xla.sliding_window_attention(q, k, v, window=32))(q, k, v)
    return max(int(np.prod(var.aval.shape)) for eqn in jaxpr.eqns for var in eqn.outvars)
  assert biggest(4096) <= 2.2 * biggest(2048)
  assert biggest(4096) < 4096 * 4096 // 8


@pytest.mark.parametrize("bad,match", [
    (dict(window=0), "window"), (dict(implementation="cuda-magic"), "implementation")])
def test_api_rejects_bad_arguments(bad, match):
  q, k, v = _qkv(1, 8, 2, 2, 4)
  kwargs = dict(window=4) | bad
  with pytest.raises(ValueError, match=match):
    api.sliding_window_attention(q, k, v, **kwargs)


def test_api_rejects_bad_gqa():
  q, _, _ = _qkv(1, 8, 4, 4, 4)
  _, k, v = _qkv(1, 8, 3, 3, 4)
  with pytest.raises(ValueError, match="divide"):
    api.sliding_window_attention(q, k, v, window=4)


@pytest.mark.parametrize("t,window,block,h,kv", [
    (40, 13, 8, 4, 2),     # strips: band over two earlier blocks, GQA
    (100, 70, 32, 4, 2),   # block by block (few blocks of >= 32 rows), ragged last block
    (37, 64, 16, 6, 3),    # full causal, ragged T
])
@pytest.mark.parametrize("rows,keep", [   # rows per loop step (None: whole batch); keep: the
    (1, False), (2, False), (4, False),    # forward's probabilities for the backward (a loop
    (None, False), (None, True), (2, True)])  # stacks its steps')
def test_row_loop_agrees_with_dense(t, window, block, h, kv, rows, keep, monkeypatch):
  """The CPU path's loop over (example, kv head) rows, one, two (kv heads of one example or
  one of each of two) or four rows a step, and the whole batch at once, recomputing the
  probabilities in the backward or keeping them from the forward, compute what the dense
  reference computes, forward and gradients, under the loop's own custom VJP."""
  b = 4
  monkeypatch.setattr(policy, "rows_per_step",
                      lambda per_row, scores, b, n_kv, head_dim: rows or b * n_kv)
  q, k, v = _qkv(b, t, h, kv, 8, seed=4)
  w = jax.random.normal(jax.random.PRNGKey(5), (b, t, h, 8))
  fns = {"dense": lambda q, k, v: reference.sliding_window_attention(q, k, v, window=window),
         "xla": functools.partial(xla.sliding_window_attention, window=window, block_size=block,
                                  keep=keep)}
  results = {name: jax.jit(jax.value_and_grad(lambda q, k, v, f=f: jnp.sum(f(q, k, v) * w),
                                              argnums=(0, 1, 2)))(q, k, v)
             for name, f in fns.items()}
  (value, grads), (want, want_grads) = results["xla"], results["dense"]
  np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-4)   # a sum of ~5K terms
  for g, g_want in zip(grads, want_grads):
    np.testing.assert_allclose(g, g_want, rtol=1e-4, atol=1e-5)


def test_kept_probabilities_replace_the_backward_recomputation():
  """With ``keep`` the backward reads the forward's probabilities: its gradient program has
  one exp per query block (the forward's) where the flash-style one has two, and one score
  matmul fewer; the gradients are those of the recomputing backward."""
  q, k, v = _qkv(2, 64, 4, 2, 8)
  def grad_fn(keep):
    f = functools.partial(xla.sliding_window_attention, window=64, block_size=16, per_row=False,
                          keep=keep)
    return jax.grad(lambda q, k, v: jnp.sum(f(q, k, v) ** 2), argnums=(0, 1, 2))
  def eqns(jaxpr):                               # every equation, nested jaxprs included
    return [x for e in jaxpr.eqns for x in [e] + [y for sub in
            jax.extend.core.jaxprs_in_params(e.params) for y in eqns(sub)]]
  def count(keep, name):
    return sum(e.primitive.name == name for e in eqns(jax.make_jaxpr(grad_fn(keep))(q, k, v).jaxpr))
  assert (count(True, "exp"), count(False, "exp")) == (4, 8)          # 4 query blocks
  assert count(False, "dot_general") - count(True, "dot_general") == 4
  for kept, recomputed in zip(jax.jit(grad_fn(True))(q, k, v), jax.jit(grad_fn(False))(q, k, v)):
    np.testing.assert_allclose(kept, recomputed, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("window", [32, 64])
@pytest.mark.parametrize("keep", [True, False])
def test_backward_moves_no_score_sized_tensor(window, keep):
  """The dV / dK matmuls read the probabilities in place: no transpose or copy in the
  compiled CPU gradient program is score-like (larger than q, without a head-dim axis among
  its last two; one query block's scores here are 1.5x (strips, w 32) or up to 2x (full)
  q's size). Contracting the query and group axes
  separately made XLA:CPU copy every block's probabilities and score gradients transposed.
  The regrouping of q, k, v into kv-head rows always copies, so an empty match means the
  pattern no longer reads the HLO, not that the program is clean."""
  q, k, v = _qkv(2, 64, 4, 2, 8)
  f = functools.partial(xla.sliding_window_attention, window=window, block_size=16,
                        per_row=False, keep=keep)
  hlo = jax.jit(jax.grad(lambda q, k, v: jnp.sum(f(q, k, v) ** 2), argnums=(0, 1, 2))).lower(
      q, k, v).compile().as_text()
  moved = [[int(x) for x in dims.split(",")]
           for dims in re.findall(r"= f32\[([\d,]+)\]\{[\d,]*\} (?:transpose|copy)\(", hlo)]
  # score-like: larger than q, and no head-dim axis among the last two (the CPU path moves
  # q- and key-strip-sized operands of the dV / dK matmuls into [D, rows] order on purpose)
  score_like = [m for m in moved if np.prod(m) > q.size and q.shape[-1] not in m[-2:]]
  assert moved and not score_like, score_like


@pytest.mark.parametrize("window", [32, 64])
@pytest.mark.parametrize("per_row", [True, False])
def test_cpu_gradient_matmuls_contract_the_left_operands_last_axis(window, per_row):
  """Every matmul of the compiled CPU gradient program contracts its left operand's last
  axis, the form XLA:CPU gives its fast dot kernel (YNNPACK). The dV / dK products contract
  the query rows, which lead their operands; left as such, XLA:CPU ran them as batched Eigen
  contractions at about a third of the rate (``_contract_rows``)."""
  q, k, v = _qkv(2, 64, 4, 2, 8)
  f = functools.partial(xla.sliding_window_attention, window=window, block_size=16,
                        per_row=per_row)
  hlo = jax.jit(jax.grad(lambda q, k, v: jnp.sum(f(q, k, v) ** 2), argnums=(0, 1, 2))).lower(
      q, k, v).compile().as_text()
  assert len(dots(hlo)) >= 6, hlo                # scores, values and four gradient matmuls
  assert not slow_form_dots(hlo), slow_form_dots(hlo)


def test_probabilities_are_kept_only_on_cpu_and_within_the_byte_cap():
  from pallas_kernels import dispatch
  cap = xla.KEEP_MAX_BYTES // 4                  # score elements
  assert policy.keeps(None, cap) and not policy.keeps(None, cap + 1)
  for platform in ("gpu", "tpu"):
    with dispatch.compile_for(platform):
      assert not policy.keeps(None, 16)
  assert policy.keeps(True, 4 * cap) and not policy.keeps(False, 16)


@pytest.mark.parametrize("scores,per_row,cores,head_dim,rows", [
    (2 ** 18, None, 1, 64, 16),   # 1 MB of scores: the whole batch (2 examples x 8 kv heads)
    (2 ** 20, None, 1, 64, 4),    # 4 MB: as many rows as fit 1 MB
    (2 ** 24, None, 1, 64, 1),    # 64 MB: one row a step
    (2 ** 20, None, 2, 16, 4),    # several cores, small heads: rows as on one core
    (2 ** 24, None, 2, 64, 16),   # several cores, head dim 64: the whole batch
    (2 ** 18, True, 2, 64, 16), (2 ** 24, False, 1, 16, 16)])
def test_rows_per_loop_step_follow_the_cache_budget(scores, per_row, cores, head_dim, rows,
                                                   monkeypatch):
  from pallas_kernels import dispatch
  monkeypatch.setattr(dispatch, "cpu_threads", lambda: cores)
  assert policy.rows_per_step(per_row, scores, 2, 8, head_dim) == rows


def test_row_by_row_only_on_a_one_device_cpu():
  """Row by row is the default only where it pays: compiled for CPU on one device (or per
  device, inside a shard_map). For GPU and TPU the XLA path is the kernels' baseline, and
  under a mesh of several devices the batch is sharded (a loop over it would gather it)."""
  from jax.sharding import AbstractMesh
  from pallas_kernels import dispatch
  assert dispatch.one_cpu_device()
  for platform in ("gpu", "tpu"):
    with dispatch.compile_for(platform):
      assert not dispatch.one_cpu_device()
  with jax.sharding.use_abstract_mesh(AbstractMesh((2,), ("data",))):
    assert not dispatch.one_cpu_device()
  with jax.sharding.use_abstract_mesh(AbstractMesh((1,), ("data",))):
    assert dispatch.one_cpu_device()
  # Inside a shard_map manual over every axis each device has its own rows: a loop is local.
  manual = (jax.sharding.AxisType.Manual,) * 2
  with jax.sharding.use_abstract_mesh(AbstractMesh((2, 1), ("data", "fsdp"), axis_types=manual)):
    assert dispatch.one_cpu_device()
  partly = (jax.sharding.AxisType.Manual, jax.sharding.AxisType.Explicit)
  with jax.sharding.use_abstract_mesh(AbstractMesh((2, 2), ("data", "fsdp"), axis_types=partly)):
    assert not dispatch.one_cpu_device()


@pytest.mark.parametrize("b,t,window,d,cores,looped", [
    (8, 256, 32, 16, 1, False),   # 1.5 MB of scores: at once
    (4, 256, 256, 16, 1, True),   # 2.5 MB: row by row
    (8, 256, 256, 16, 1, True),   # 5 MB: row by row
    (8, 256, 256, 16, 2, True),   # two cores, head dim 16: row by row
    (8, 256, 256, 64, 2, False),  # two cores, head dim 64: at once
    (8, 256, 256, 64, 1, True)])  # one core, head dim 64: row by row
def test_row_by_row_by_default_only_once_the_scores_outgrow_the_cache(b, t, window, d, cores,
                                                                      looped, monkeypatch):
  from pallas_kernels import dispatch
  monkeypatch.setattr(dispatch, "cpu_threads", lambda: cores)
  q, k, v = _qkv(b, t, 4, 2, d)
  jaxpr = str(jax.make_jaxpr(jax.grad(
      lambda q, k, v: jnp.sum(xla.sliding_window_attention(q, k, v, window=window))))(q, k, v))
  assert ("scan" in jaxpr or "while" in jaxpr) == looped


@pytest.mark.parametrize("t,window,block", [(1024, 32, 16), (1024, 20, 16), (1024, 128, 64),
                                            (1024, 1000, 256), (12, 64, 12)])
def test_default_swa_blocks_are_half_the_window_within_bounds(t, window, block):
  assert xla.default_block_size(t, window) == block


@pytest.mark.parametrize("t,head_dim,block", [(256, 16, 64), (512, 16, 64), (512, 64, 128),
                                              (4096, 16, 256), (4096, 128, 256)])
def test_default_causal_blocks_are_64_or_128_rows_or_a_sixteenth(t, head_dim, block):
  assert xla.causal_block_size(t, head_dim) == block


@pytest.mark.parametrize("t,window", [(300, 100), (300, 300)])
def test_default_blocks_at_head_dim_64_agree_with_dense(t, window):
  """At head dim 64 with the default blocks (SWA 50 rows, causal 64: ragged last blocks)."""
  q, k, v = _qkv(2, t, 4, 2, 64, seed=6)
  w = jax.random.normal(jax.random.PRNGKey(7), (2, t, 4, 64))
  fns = (lambda q, k, v: reference.sliding_window_attention(q, k, v, window=window),
         lambda q, k, v: xla.sliding_window_attention(q, k, v, window=window))
  (value, grads), (want, want_grads) = (
      jax.jit(jax.value_and_grad(lambda q, k, v, f=f: jnp.sum(f(q, k, v) * w),
                                 argnums=(0, 1, 2)))(q, k, v) for f in fns[::-1])
  np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-3)
  for g, g_want in zip(grads, want_grads):
    np.testing.assert_allclose(g, g_want, rtol=1e-4, atol=1e-4)


def test_swa_block_by_block_only_for_cpu():
  """On CPU a few large SWA blocks run block by block (a score matmul per block); compiled
  for GPU or TPU, the XLA path keeps one batched strip matmul (one shape to tune)."""
  from pallas_kernels import dispatch
  q, k, v = _qkv(2, 256, 4, 2, 16)
  count = lambda: str(jax.make_jaxpr(functools.partial(
      xla.sliding_window_attention, window=128))(q, k, v)).count("dot_general")
  assert count() == 2 * 4                      # 4 blocks of 64 rows: scores and values each
  for platform in ("gpu", "tpu"):
    with dispatch.compile_for(platform):
      assert count() == 2


@pytest.mark.parametrize("t,block,h,kv,rows,dtype", [
    (40, 8, 4, 2, None, "float32"),   # 5 query blocks: a padding block makes 6, 3 folded steps
    (37, 8, 6, 3, None, "float32"),   # T not a multiple of the block
    (64, 16, 4, 1, None, "float32"),  # 4 blocks, MQA
    (5, 8, 2, 2, None, "float32"),    # T smaller than one block
    (37, 8, 4, 2, 1, "float32"),      # one (example, kv head) row per loop step
    (37, 8, 6, 3, 2, "float32"),      # two rows per step: 3 steps over 6 rows
    (40, 8, 4, 2, None, "bfloat16"),
])
def test_folded_causal_attention_matches_dense_forward_and_grads(t, block, h, kv, rows, dtype,
                                                                 monkeypatch):
  """The GPU/TPU form of full causal attention (query blocks p and N - 1 - p per scan step),
  run here on CPU: output and every gradient equal the dense masked oracle."""
  q, k, v = _qkv(2, t, h, kv, 8, dtype=jnp.dtype(dtype))
  if rows is not None:
    monkeypatch.setattr(policy, "rows_per_step", lambda *a: rows)
  tol = dict(rtol=1e-4, atol=1e-5) if dtype == "float32" else dict(rtol=2e-2, atol=2e-2)
  f32 = lambda x: np.asarray(x, np.float32)
  dense = lambda q, k, v: reference.sliding_window_attention(q, k, v, window=t)
  folded = lambda q, k, v: xla.full_causal_attention(q, k, v, block_size=block, folded=True)
  np.testing.assert_allclose(f32(jax.jit(folded)(q, k, v)), f32(dense(q, k, v)), **tol)
  w = jax.random.normal(jax.random.PRNGKey(9), (2, t, h, 8))
  grads = lambda f: jax.jit(jax.grad(lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32) * w),
                                     argnums=(0, 1, 2)))(q, k, v)
  for g_folded, g_dense in zip(grads(folded), grads(dense), strict=True):
    np.testing.assert_allclose(f32(g_folded), f32(g_dense), **tol)


def test_full_causal_attention_has_one_matmul_shape_per_product_on_gpu_and_tpu():
  """Unrolled, N causal blocks give the scores N matmul shapes (each a GPU autotunes: an
  H200 took 81 s to compile the T=2048 forward); folded (GPU and TPU), the forward and
  backward are scans with one shape per product: 2 matmuls in the forward and 7 in the
  backward (5 of attention, 2 that add the pairs' key-block gradients into their blocks),
  however many blocks. CPU keeps the unrolled blocks."""
  from pallas_kernels import dispatch
  q, k, v = _qkv(1, 256, 4, 2, 16)
  ct = jnp.ones_like(q)

  def matmuls():
    f = lambda q, k, v: jax.vjp(functools.partial(xla.full_causal_attention, block_size=32),
                                q, k, v)[1](ct)
    return str(jax.make_jaxpr(f)(q, k, v)).count("dot_general")

  assert matmuls() >= 8 * 2 + 8 * 4          # 8 unrolled blocks, forward and backward
  for platform in ("gpu", "tpu"):
    with dispatch.compile_for(platform):
      assert matmuls() == 2 + 7
