"""Sliding-window flash attention for TPU (Pallas, Mosaic), forward and backward.

Layout inside the kernels is head-major, [B, H, T, D], so that every block's last two dims
are (block, D): a multiple of 8 rows (or all of T) by the full head dim, which is what
Mosaic's (8, 128) tiling accepts. The grid's last axis walks the fixed-length band of key
blocks of a query block (``index_map`` offsets from the query block and clamps at 0); a
``pl.when`` skips the clamped, out-of-band steps, so the work is O(T * w).

Backward (flash-attention-2): the forward pass saves O and the row log-sum-exp; a dQ kernel
walks the same band as the forward, and a dK/dV kernel walks, per key block, the query
blocks that can see it, for every query head of the key's GQA group (one grid axis of
length group * band), accumulating in VMEM scratch.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pallas_kernels import costs
from pallas_kernels.swa import common

DEFAULT_BLOCK = 128
_NT = (((1,), (1,)), ((), ()))   # a @ b.T
_TN = (((0,), (0,)), ((), ()))   # a.T @ b
# Integer division and remainder below use lax.div / lax.rem (operands are >= 0): jnp's `//`
# and `%` lower through `sign`, whose Mosaic rule asks the local TPU for its generation and
# so fails when exporting for TPU from a CPU host (jax 0.10.2).


def default_block_size(t: int) -> int:
  """128 rows (MXU-sized); for short sequences all of T rounded up to a multiple of 8."""
  return min(DEFAULT_BLOCK, common.round_up(t, 8))


def _interpret_params(interpret):
  if interpret is True:
    return pltpu.InterpretParams()
  return interpret or False


def _compiler_params(n_parallel: int):
  return pltpu.CompilerParams(
      dimension_semantics=("parallel",) * n_parallel + ("arbitrary",))


def _forward_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, m_sc, l_sc, acc_sc, *,
                    scale, window, t, c, n_back):
  i, j = pl.program_id(2), pl.program_id(3)
  kb = i - n_back + j

  @pl.when(j == 0)
  def _init():
    m_sc[...] = jnp.full(m_sc.shape, common.MASK_VALUE, jnp.float32)
    l_sc[...] = jnp.zeros(l_sc.shape, jnp.float32)
    acc_sc[...] = jnp.zeros(acc_sc.shape, jnp.float32)

  @pl.when(kb >= 0)
  def _step():
    q_CxD, k_CxD, v_CxD = q_ref[...], k_ref[...], v_ref[...]
    mask_CxC = common.band_mask(i * c, kb * c, c, c, window, t)
    s_CxC = jax.lax.dot_general(q_CxD, k_CxD, _NT, preferred_element_type=jnp.float32) * scale
    s_CxC = jnp.where(mask_CxC, s_CxC, common.MASK_VALUE)
    m_prev_Cx1 = m_sc[...]
    m_new_Cx1 = jnp.maximum(m_prev_Cx1, jnp.max(s_CxC, axis=1, keepdims=True))
    p_CxC = jnp.where(mask_CxC, jnp.exp(s_CxC - m_new_Cx1), 0.0)
    alpha_Cx1 = jnp.exp(m_prev_Cx1 - m_new_Cx1)
    l_sc[...] = alpha_Cx1 * l_sc[...] + jnp.sum(p_CxC, axis=1, keepdims=True)
    acc_sc[...] = alpha_Cx1 * acc_sc[...] + jnp.dot(
        p_CxC.astype(v_CxD.dtype), v_CxD, preferred_element_type=jnp.float32)
    m_sc[...] = m_new_Cx1

  @pl.when(j == n_back)
  def _finish():
    o_CxD, lse_Cx1 = common.finalize_softmax(m_sc[...], l_sc[...], acc_sc[...])
    o_ref[...] = o_CxD.astype(o_ref.dtype)
    lse_ref[...] = lse_Cx1


def _probs_and_dscores(q_CxD, k_CxD, v_CxD, do_CxD, lse_Cx1, delta_Cx1, mask_CxC, scale):
  """Recomputed probabilities P and score gradient dS = P * (dO V^T - delta) * scale."""
  s_CxC = jax.lax.dot_general(q_CxD, k_CxD, _NT, preferred_element_type=jnp.float32) * scale
  p_CxC = jnp.where(mask_CxC, jnp.exp(s_CxC - lse_Cx1), 0.0)
  dp_CxC = jax.lax.dot_general(do_CxD, v_CxD, _NT, preferred_element_type=jnp.float32)
  return p_CxC, p_CxC * (dp_CxC - delta_Cx1) * scale


def _dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, dq_sc, *,
               scale, window, t, c, n_back):
  i, j = pl.program_id(2), pl.program_id(3)
  kb = i - n_back + j

  @pl.when(j == 0)
  def _init():
    dq_sc[...] = jnp.zeros(dq_sc.shape, jnp.float32)

  @pl.when(kb >= 0)
  def _step():
    k_CxD = k_ref[...]
    mask_CxC = common.band_mask(i * c, kb * c, c, c, window, t)
    _, ds_CxC = _probs_and_dscores(q_ref[...], k_CxD, v_ref[...], do_ref[...], lse_ref[...],
                                   delta_ref[...], mask_CxC, scale)
    dq_sc[...] += jnp.dot(ds_CxC.astype(k_CxD.dtype), k_CxD, preferred_element_type=jnp.float32)

  @pl.when(j == n_back)
  def _finish():
    dq_ref[...] = dq_sc[...].astype(dq_ref.dtype)


def _dkv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref, dk_sc, dv_sc,
                *, scale, window, t, c, n_back, n_q):
  kb, r = pl.program_id(2), pl.program_id(3)
  qb = kb + jax.lax.rem(r, n_back + 1)   # r walks (query head in group) x (query block in band)

  @pl.when(r == 0)
  def _init():
    dk_sc[...] = jnp.zeros(dk_sc.shape, jnp.float32)
    dv_sc[...] = jnp.zeros(dv_sc.shape, jnp.float32)

  @pl.when(qb < n_q)
  def _step():
    q_CxD, do_CxD = q_ref[...], do_ref[...]
    mask_CxC = common.band_mask(qb * c, kb * c, c, c, window, t)
    p_CxC, ds_CxC = _probs_and_dscores(q_CxD, k_ref[...], v_ref[...], do_CxD, lse_ref[...],
                                       delta_ref[...], mask_CxC, scale)
    dv_sc[...] += jax.lax.dot_general(p_CxC.astype(do_CxD.dtype), do_CxD, _TN,
                                      preferred_element_type=jnp.float32)
    dk_sc[...] += jax.lax.dot_general(ds_CxC.astype(q_CxD.dtype), q_CxD, _TN,
                                      preferred_element_type=jnp.float32)

  @pl.when(r == pl.num_programs(3) - 1)
  def _finish():
    dk_ref[...] = dk_sc[...].astype(dk_ref.dtype)
    dv_ref[...] = dv_sc[...].astype(dv_ref.dtype)


def _flash(q_BxHxTxD, k_BxKxTxD, v_BxKxTxD, *, window, scale, t, blocks, interpret):
  """custom_vjp attention on padded head-major arrays (T a multiple of every phase's block)."""
  b, h, t_pad, d = q_BxHxTxD.shape
  n_kv = k_BxKxTxD.shape[1]
  g = h // n_kv
  params = dict(interpret=_interpret_params(interpret))
  lse_shape = jax.ShapeDtypeStruct((b, h, t_pad, 1), jnp.float32)
  # Model FLOPs over the band of the unpadded T (costs module); exp per scored pair.
  cost = lambda backward, ins, outs: costs.estimate(
      costs.attention_flops(b, h, t, window, d, backward), costs.band_pairs(t, window) * b * h,
      ins, outs)

  def phase(c):
    """(static kernel arguments, query-block count, row spec, band spec) at block ``c``."""
    n_q = t_pad // c
    n_back = common.blocks_back(window, c, n_q)
    row = lambda dd: pl.BlockSpec((None, None, c, dd), lambda b_, h_, i, j: (b_, h_, i, 0))
    band = lambda dd: pl.BlockSpec(
        (None, None, c, dd),
        lambda b_, h_, i, j: (b_, jax.lax.div(h_, g), jnp.maximum(i - n_back + j, 0), 0))
    return dict(scale=scale, window=window, t=t, c=c, n_back=n_back), n_q, row, band

  def forward(q, k, v):
    static, n_q, row, band = phase(blocks.fwd)
    c = blocks.fwd
    return pl.pallas_call(
        functools.partial(_forward_kernel, **static),
        grid=(b, h, n_q, static["n_back"] + 1), in_specs=[row(d), band(d), band(d)],
        out_specs=[row(d), row(1)],
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct((b, h, t_pad, 1), jnp.float32)],
        scratch_shapes=[pltpu.VMEM((c, 1), jnp.float32), pltpu.VMEM((c, 1), jnp.float32),
                        pltpu.VMEM((c, d), jnp.float32)],
        compiler_params=_compiler_params(3), name="swa_fwd_tpu",
        cost_estimate=cost(False, (q, k, v), (q, lse_shape)), **params)(q, k, v)

  def backward(q, k, v, o, lse, do):
    delta = jnp.sum(do.astype(jnp.float32) * o.astype(jnp.float32), axis=-1, keepdims=True)
    static, n_q, row, band = phase(blocks.dq)
    dq = pl.pallas_call(
        functools.partial(_dq_kernel, **static),
        grid=(b, h, n_q, static["n_back"] + 1),
        in_specs=[row(d), band(d), band(d), row(d), row(1), row(1)],
        out_specs=row(d), out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        scratch_shapes=[pltpu.VMEM((blocks.dq, d), jnp.float32)],
        compiler_params=_compiler_params(3), name="swa_dq_tpu",
        cost_estimate=cost(True, (q, k, v, do, lse, delta), (q,)), **params)(
            q, k, v, do, lse, delta)
    static, n_q, _, _ = phase(blocks.dkv)
    c = blocks.dkv
    n_band = static["n_back"] + 1
    # Grid (B, H_kv, key block, group * band): query head kh*g + r // n_band, query block
    # kb + r % n_band, clamped to the last block (the step is then skipped).
    query = lambda dd: pl.BlockSpec(
        (None, None, c, dd), lambda b_, kh, kb, r: (
            b_, kh * g + jax.lax.div(r, n_band),
            jnp.minimum(kb + jax.lax.rem(r, n_band), n_q - 1), 0))
    key = pl.BlockSpec((None, None, c, d), lambda b_, kh, kb, r: (b_, kh, kb, 0))
    dk, dv = pl.pallas_call(
        functools.partial(_dkv_kernel, n_q=n_q, **static),
        grid=(b, n_kv, n_q, g * n_band),
        in_specs=[query(d), key, key, query(d), query(1), query(1)],
        out_specs=[key, key],
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
        scratch_shapes=[pltpu.VMEM((c, d), jnp.float32), pltpu.VMEM((c, d), jnp.float32)],
        compiler_params=_compiler_params(3), name="swa_dkv_tpu",
        cost_estimate=cost(True, (q, k, v, do, lse, delta), (k, v)), **params)(
            q, k, v, do, lse, delta)
    return dq, dk, dv

  return common.with_flash_vjp(forward, backward)(q_BxHxTxD, k_BxKxTxD, v_BxKxTxD)


def sliding_window_attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, *, window: int, scale=None,
                             block_size: "int | common.BlockSizes | None" = None, interpret=False):
  """q [B, T, H, D], k/v [B, T, H_kv, D] -> [B, T, H, D]. ``block_size``: one block for
  every phase, or a ``BlockSizes``; None: ``default_block_size``. ``interpret``: False (Mosaic),
  True (interpreter, default params) or a ``pltpu.InterpretParams``."""
  t, d = q_BxTxHxD.shape[1], q_BxTxHxD.shape[3]
  blocks = common.BlockSizes.of(block_size, default_block_size(t))
  if any(c % 8 for c in blocks.blocks()):
    raise ValueError(f"block_size must be a multiple of 8 for pallas_tpu, in every phase; got {blocks}")
  scale = d ** -0.5 if scale is None else scale
  t_pad = common.round_up(t, blocks.pad_multiple)
  head_major = lambda x: common.pad_axis(x, 1, t_pad).transpose(0, 2, 1, 3)
  o_BxHxTxD = _flash(head_major(q_BxTxHxD), head_major(k_BxTxKxD), head_major(v_BxTxKxD),
                     window=min(window, t), scale=scale, t=t, blocks=blocks, interpret=interpret)
  return o_BxHxTxD.transpose(0, 2, 1, 3)[:, :t]
