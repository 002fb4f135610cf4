"""Sliding-window flash attention for GPU (Pallas, Triton lowering), forward and backward.

Layout stays [B, T, H, D] (a ``None`` block dim squeezes the head axis), with T padded to a
multiple of the block and D padded to a power of 2 (Triton tiles must be powers of 2). Each
program owns one (batch, head, block) and walks its band with a ``fori_loop`` whose bounds
depend on the block index, so only the key (or query) blocks that meet the band are
visited: O(T * w) work.

Backward (flash-attention-2): the forward saves O and the row log-sum-exp; a dQ kernel walks
the key blocks of each query block, and a dK/dV kernel walks, for each key block and query
head, the query blocks that can see it. dK/dV come out per query head and are summed over
each GQA group outside the kernel (so no two programs write the same block).
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels import costs
from pallas_kernels.swa import common

DEFAULT_BLOCK = 64
_NT = (((1,), (1,)), ((), ()))   # a @ b.T
_TN = (((0,), (0,)), ((), ()))   # a.T @ b


def default_block_size(t: int) -> int:
  """64 rows (fits Ampere and Hopper shared memory at D <= 128 with 2-3 pipeline stages);
  short sequences use the next power of 2 >= T (at least 16, the smallest tl.dot tile)."""
  return min(DEFAULT_BLOCK, max(16, common.next_power_of_2(t)))


def _compiler_params(d: int):
  return plgpu.CompilerParams(num_warps=4 if d <= 64 else 8, num_stages=2)


def _forward_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, *, scale, window, t, c, n_back):
  i = pl.program_id(2)
  q_CxD = q_ref[...]
  d = q_CxD.shape[1]

  def body(kb, carry):
    acc_CxD, m_C, l_C = carry
    k_CxD = k_ref[pl.ds(kb * c, c), :]
    v_CxD = v_ref[pl.ds(kb * c, c), :]
    mask_CxC = common.band_mask(i * c, kb * c, c, c, window, t)
    s_CxC = jax.lax.dot_general(q_CxD, k_CxD, _NT, preferred_element_type=jnp.float32) * scale
    s_CxC = jnp.where(mask_CxC, s_CxC, common.MASK_VALUE)
    m_new_C = jnp.maximum(m_C, jnp.max(s_CxC, axis=1))
    p_CxC = jnp.where(mask_CxC, jnp.exp(s_CxC - m_new_C[:, None]), 0.0)
    alpha_C = jnp.exp(m_C - m_new_C)
    acc_CxD = alpha_C[:, None] * acc_CxD + jax.lax.dot_general(
        p_CxC.astype(v_CxD.dtype), v_CxD, (((1,), (0,)), ((), ())),
        preferred_element_type=jnp.float32)
    return acc_CxD, m_new_C, alpha_C * l_C + jnp.sum(p_CxC, axis=1)

  init = (jnp.zeros((c, d), jnp.float32), jnp.full((c,), common.MASK_VALUE, jnp.float32),
          jnp.zeros((c,), jnp.float32))
  acc_CxD, m_C, l_C = jax.lax.fori_loop(jnp.maximum(i - n_back, 0), i + 1, body, init)
  o_CxD, lse_C = common.finalize_softmax(m_C[:, None], l_C[:, None], acc_CxD)
  o_ref[...] = o_CxD.astype(o_ref.dtype)
  lse_ref[...] = lse_C[:, 0]


def _probs_and_dscores(q_CxD, k_CxD, v_CxD, do_CxD, lse_C, delta_C, mask_CxC, scale):
  """Recomputed probabilities P and score gradient dS = P * (dO V^T - delta) * scale."""
  s_CxC = jax.lax.dot_general(q_CxD, k_CxD, _NT, preferred_element_type=jnp.float32) * scale
  p_CxC = jnp.where(mask_CxC, jnp.exp(s_CxC - lse_C[:, None]), 0.0)
  dp_CxC = jax.lax.dot_general(do_CxD, v_CxD, _NT, preferred_element_type=jnp.float32)
  return p_CxC, p_CxC * (dp_CxC - delta_C[:, None]) * scale


def _dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, *,
               scale, window, t, c, n_back):
  i = pl.program_id(2)
  q_CxD, do_CxD, lse_C, delta_C = q_ref[...], do_ref[...], lse_ref[...], delta_ref[...]

  def body(kb, dq_CxD):
    k_CxD = k_ref[pl.ds(kb * c, c), :]
    mask_CxC = common.band_mask(i * c, kb * c, c, c, window, t)
    _, ds_CxC = _probs_and_dscores(q_CxD, k_CxD, v_ref[pl.ds(kb * c, c), :], do_CxD, lse_C,
                                   delta_C, mask_CxC, scale)
    return dq_CxD + jax.lax.dot_general(ds_CxC.astype(k_CxD.dtype), k_CxD,
                                        (((1,), (0,)), ((), ())),
                                        preferred_element_type=jnp.float32)

  dq_CxD = jax.lax.fori_loop(jnp.maximum(i - n_back, 0), i + 1, body,
                             jnp.zeros(q_CxD.shape, jnp.float32))
  dq_ref[...] = dq_CxD.astype(dq_ref.dtype)


def _dkv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref, *,
                scale, window, t, c, n_back, n_q):
  kb = pl.program_id(2)
  k_CxD, v_CxD = k_ref[...], v_ref[...]

  def body(qb, carry):
    dk_CxD, dv_CxD = carry
    q_CxD = q_ref[pl.ds(qb * c, c), :]
    do_CxD = do_ref[pl.ds(qb * c, c), :]
    mask_CxC = common.band_mask(qb * c, kb * c, c, c, window, t)
    p_CxC, ds_CxC = _probs_and_dscores(q_CxD, k_CxD, v_CxD, do_CxD, lse_ref[pl.ds(qb * c, c)],
                                       delta_ref[pl.ds(qb * c, c)], mask_CxC, scale)
    dv_CxD = dv_CxD + jax.lax.dot_general(p_CxC.astype(do_CxD.dtype), do_CxD, _TN,
                                          preferred_element_type=jnp.float32)
    dk_CxD = dk_CxD + jax.lax.dot_general(ds_CxC.astype(q_CxD.dtype), q_CxD, _TN,
                                          preferred_element_type=jnp.float32)
    return dk_CxD, dv_CxD

  zeros = jnp.zeros(k_CxD.shape, jnp.float32)
  dk_CxD, dv_CxD = jax.lax.fori_loop(kb, jnp.minimum(kb + n_back, n_q - 1) + 1, body,
                                     (zeros, zeros))
  dk_ref[...] = dk_CxD
  dv_ref[...] = dv_CxD


def _flash(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, *, window, scale, t, blocks, interpret):
  """custom_vjp attention on padded arrays (T a multiple of every phase's block, D a power
  of 2)."""
  b, t_pad, h, d = q_BxTxHxD.shape
  n_kv = k_BxTxKxD.shape[2]
  g = h // n_kv
  params = dict(interpret=interpret, compiler_params=_compiler_params(d))
  # Model FLOPs over the band of the unpadded T (costs module); exp per scored pair.
  cost = lambda backward, ins, outs: costs.estimate(
      costs.attention_flops(b, h, t, window, d, backward), costs.band_pairs(t, window) * b * h,
      ins, outs)
  lse_shape = jax.ShapeDtypeStruct((b, h, t_pad), jnp.float32)
  whole_q = pl.BlockSpec((None, t_pad, None, d), lambda b_, h_, i: (b_, 0, h_, 0))
  whole_kv = pl.BlockSpec((None, t_pad, None, d), lambda b_, h_, i: (b_, 0, jax.lax.div(h_, g), 0))
  whole_row = pl.BlockSpec((None, None, t_pad), lambda b_, h_, i: (b_, h_, 0))

  def phase(c):
    """(static kernel arguments, grid, block, kv block, row spec) at block ``c``."""
    n_q = t_pad // c
    static = dict(scale=scale, window=window, t=t, c=c, n_back=common.blocks_back(window, c, n_q))
    block = pl.BlockSpec((None, c, None, d), lambda b_, h_, i: (b_, i, h_, 0))
    block_kv = pl.BlockSpec((None, c, None, d), lambda b_, h_, i: (b_, i, jax.lax.div(h_, g), 0))
    row = pl.BlockSpec((None, None, c), lambda b_, h_, i: (b_, h_, i))
    return static, (b, h, n_q), block, block_kv, row

  def forward(q, k, v):
    static, grid, block, _, row = phase(blocks.fwd)
    return pl.pallas_call(
        functools.partial(_forward_kernel, **static),
        grid=grid, in_specs=[block, whole_kv, whole_kv], out_specs=[block, row],
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct((b, h, t_pad), jnp.float32)],
        name="swa_fwd_gpu", cost_estimate=cost(False, (q, k, v), (q, lse_shape)),
        **params)(q, k, v)

  def backward(q, k, v, o, lse, do):
    delta = jnp.einsum("bthd,bthd->bht", do.astype(jnp.float32), o.astype(jnp.float32))
    static, grid, block, _, row = phase(blocks.dq)
    dq = pl.pallas_call(
        functools.partial(_dq_kernel, **static),
        grid=grid, in_specs=[block, whole_kv, whole_kv, block, row, row],
        out_specs=block, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        name="swa_dq_gpu", cost_estimate=cost(True, (q, k, v, do, lse, delta), (q,)),
        **params)(q, k, v, do, lse, delta)
    per_head = jax.ShapeDtypeStruct(q.shape, jnp.float32)
    static, grid, block, block_kv, _ = phase(blocks.dkv)
    dk_h, dv_h = pl.pallas_call(
        functools.partial(_dkv_kernel, n_q=grid[2], **static),
        grid=grid, in_specs=[whole_q, block_kv, block_kv, whole_q, whole_row, whole_row],
        out_specs=[block, block], out_shape=[per_head, per_head],
        name="swa_dkv_gpu",
        cost_estimate=cost(True, (q, k, v, do, lse, delta), (per_head, per_head)),
        **params)(q, k, v, do, lse, delta)
    group_sum = lambda x, like: x.reshape(b, t_pad, n_kv, g, d).sum(3).astype(like.dtype)
    return dq, group_sum(dk_h, k), group_sum(dv_h, v)

  return common.with_flash_vjp(forward, backward)(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD)


def sliding_window_attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, *, window: int, scale=None,
                             block_size: "int | common.BlockSizes | None" = None, interpret=False):
  """q [B, T, H, D], k/v [B, T, H_kv, D] -> [B, T, H, D]. ``block_size``: one block for
  every phase, or a ``BlockSizes``; None: ``default_block_size``. ``interpret``: run the kernels
  in the Pallas interpreter (CPU tests) instead of compiling them with Triton."""
  t, d = q_BxTxHxD.shape[1], q_BxTxHxD.shape[3]
  blocks = common.BlockSizes.of(block_size, default_block_size(t))
  if any(c < 16 or c != common.next_power_of_2(c) for c in blocks.blocks()):
    raise ValueError(f"block_size must be a power of 2 >= 16 for pallas_gpu, in every phase; got {blocks}")
  scale = d ** -0.5 if scale is None else scale
  t_pad, d_pad = common.round_up(t, blocks.pad_multiple), max(16, common.next_power_of_2(d))
  padded = lambda x: common.pad_axis(common.pad_axis(x, 1, t_pad), 3, d_pad)
  o_BxTxHxD = _flash(padded(q_BxTxHxD), padded(k_BxTxKxD), padded(v_BxTxKxD),
                     window=min(window, t), scale=scale, t=t, blocks=blocks,
                     interpret=bool(interpret))
  return o_BxTxHxD[:, :t, :, :d]
