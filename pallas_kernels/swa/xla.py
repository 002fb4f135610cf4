"""Blockwise sliding-window attention in plain XLA: O(T * w) time and memory.

Each query block of C positions attends only to the key blocks that intersect its band:
its own block and the ceil((w - 1) / C) blocks before it. The keys of those blocks are
gathered into one [C + n*C] strip per query block, so the whole op is two batched einsums
and a masked softmax; no T x T matrix is ever formed.
"""

import math

import jax
import jax.numpy as jnp

from pallas_kernels import dispatch


def default_block_size(t: int, window: int) -> int:
  """Half the window (each query block then reads a key strip of ~1.5 w; w gives 2 w), at
  least 16 rows, at most 256, at most T. ``python -m pallas_kernels.bench --cpu-blocks`` times
  it against half and twice it on XLA:CPU: at the toy SWA (w 32) 16-row blocks are 1.06-1.17x
  32-row ones; at d256 (D 64, w 128) no block wins across runs and batches (64 rows over 128:
  0.89-0.98x at B 8, 1.10x at B 4; 256 rows 1.8x slower)."""
  block = max(window // 2, 16)
  return max(1, min(block, 256, t))


def _grouped(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD):
  """Kv-group-major layouts: q [B, K, T, G, D], k and v [B, K, T, D]. With T ahead of the
  group axis, a block of queries and its heads form one contiguous matmul operand, so the
  score and value einsums need no transposes inside (XLA:CPU's batched matmuls are slow
  on strided operands)."""
  b, t, h, d = q_BxTxHxD.shape
  n_kv = k_BxTxKxD.shape[2]
  q_BxKxTxGxD = q_BxTxHxD.reshape(b, t, n_kv, h // n_kv, d).transpose(0, 2, 1, 3, 4)
  return q_BxKxTxGxD, k_BxTxKxD.transpose(0, 2, 1, 3), v_BxTxKxD.transpose(0, 2, 1, 3)


def _ungrouped(o_BxKxTxGxD):
  b, n_kv, t, g, d = o_BxKxTxGxD.shape
  return o_BxKxTxGxD.transpose(0, 2, 1, 3, 4).reshape(b, t, n_kv * g, d)


def _softmax_attend(q_QxGxD, k_LxD, v_LxD, mask_QxL, scale, out_dtype):
  """Masked softmax attention over leading batch axes: q [..., Q, G, D], k/v [..., L, D].

  The backward pass is flash-style (custom_vjp): it keeps only the output and the row
  log-sum-exp, recomputes the probabilities with one fused exp, and takes the softmax
  gradient's row term from dO . O instead of a reduction over the keys; this saves
  several full passes over the [Q, G, L] score tensor, which dominate on CPU.
  """
  def scores(q, k, mask):
    s = jnp.einsum("...qgd,...ld->...qgl", q, k, preferred_element_type=jnp.float32)
    return jnp.where(mask[..., :, None, :], s * scale, -jnp.inf)

  def forward(q, k, v, mask):
    s = scores(q, k, mask)
    m = jnp.max(s, axis=-1, keepdims=True)
    m = jnp.where(jnp.isfinite(m), m, 0.0)     # a query that sees no key (padding rows)
    p = jnp.exp(s - m)
    l = jnp.sum(p, axis=-1, keepdims=True)
    o = jnp.einsum("...qgl,...ld->...qgd", p.astype(v.dtype), v,
                   preferred_element_type=jnp.float32) / jnp.maximum(l, 1e-30)
    return o, m + jnp.log(jnp.maximum(l, 1e-30))

  @jax.custom_vjp
  def attend(q, k, v, mask):
    return forward(q, k, v, mask)[0].astype(out_dtype)

  def attend_fwd(q, k, v, mask):
    o, lse = forward(q, k, v, mask)
    return o.astype(out_dtype), (q, k, v, mask, o, lse)

  def attend_bwd(res, do):
    q, k, v, mask, o, lse = res
    do = do.astype(jnp.float32)
    p = jnp.exp(scores(q, k, mask) - lse)
    # dv and dk are formed transposed ([D, L]): the score-sized p and ds then enter their
    # matmuls in row-major [Q*G, L] order as the right operand, and only the small [D, L]
    # results are transposed; "...qgl,...qgd->...ld" made XLA:CPU copy p and ds transposed.
    dv = jnp.swapaxes(jnp.einsum("...qgd,...qgl->...dl", do, p), -1, -2)
    dp = jnp.einsum("...qgd,...ld->...qgl", do, v.astype(jnp.float32))
    delta = jnp.sum(do * o, axis=-1, keepdims=True)
    ds = p * (dp - delta) * scale
    dq = jnp.einsum("...qgl,...ld->...qgd", ds, k.astype(jnp.float32))
    dk = jnp.swapaxes(jnp.einsum("...qgd,...qgl->...dl", q.astype(jnp.float32), ds), -1, -2)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None

  attend.defvjp(attend_fwd, attend_bwd)
  return attend(q_QxGxD, k_LxD, v_LxD, mask_QxL)


def causal_block_size(t: int) -> int:
  """Query blocks of >= 64 rows, at most 16 of them: skipping the key blocks above the
  diagonal saves (N - 1) / 2N of the work, and few blocks keep the program small. 64 rather
  than 128: at T = 256..512 (the toy shapes) the smaller blocks' score tiles stay in cache
  and the causal saving grows (``bench --cpu-blocks``: toy 1.19-1.26x over 128 rows). At
  d256 (D 64) 128 rows are 1.09-1.11x faster at B 8 and even at B 4; not taken: with them
  ``hybrid-jax bench train`` showed no step-level gain (d256 family 1.24 / 1.27 / 1.28x
  torch before, 1.29 / 1.20 / 1.24x after)."""
  return max(64, -(-t // 16))


def full_causal_attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, *, scale=None,
                          block_size: int | None = None, per_row: bool | None = None):
  """Causal attention (the w >= T case) with causal block skipping: query block n attends
  only to the keys of blocks 0..n, so no work is spent above the diagonal. ``per_row``: see
  ``_by_row``."""
  t, d = q_BxTxHxD.shape[1], q_BxTxHxD.shape[3]
  scale = d ** -0.5 if scale is None else scale
  c = block_size or causal_block_size(t)
  core = lambda q, k, v: _full_causal_core(q, k, v, scale, c, q_BxTxHxD.dtype)
  b, _, h, _ = q_BxTxHxD.shape
  keys_per_query = sum(min((i + 1) * c, t) * (min((i + 1) * c, t) - i * c)
                       for i in range(-(-t // c))) / t
  return _ungrouped(_by_row(core, per_row, b * h * t * keys_per_query,
                            *_grouped(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD)))


def _full_causal_core(q_BxKxTxGxD, k_BxKxTxD, v_BxKxTxD, scale, c, dtype):
  t = q_BxKxTxGxD.shape[2]
  # Blocks by split and concatenate, not slices: a slice's gradient is a zero-padded copy of
  # the whole tensor, so N query blocks summed N full-size pads (8 at T = 512: ~10 ms a layer
  # on CPU); split's gradient is one concatenate, and the key prefixes' gradients add up
  # block-sized pieces.
  bounds = list(range(c, t, c))
  q_blocks, k_blocks, v_blocks = (jnp.split(x, bounds, axis=2)
                                  for x in (q_BxKxTxGxD, k_BxKxTxD, v_BxKxTxD))
  o_blocks = []
  for i, q_block in enumerate(q_blocks):
    start, end = i * c, min((i + 1) * c, t)
    causal_QxL = jnp.arange(end)[None, :] <= jnp.arange(start, end)[:, None]
    prefix = lambda blocks: jnp.concatenate(blocks[:i + 1], axis=2) if i else blocks[0]
    o_blocks.append(_softmax_attend(q_block, prefix(k_blocks), prefix(v_blocks),
                                    causal_QxL, scale, dtype))
  return jnp.concatenate(o_blocks, axis=2)


# Row by row pays once the batch's float32 scores outgrow a core's cache (2 MB L2 here):
# ``bench --cpu-rows`` on one quiet core (with 32-row SWA blocks): toy SWA (2 MB of
# scores) 0.91-0.95x, toy-B4 full attention (2.5 MB) 1.29-1.30x, toy full (5 MB) 1.35x,
# d256 SWA / full (12 / 18 MB) 1.15x / 1.07-1.11x; d256-B4 (6 / 9 MB) about even.
ROW_BY_ROW_MIN_SCORE_BYTES = 9 * 2 ** 18          # 2.25 MB


def _by_row(core, per_row, scores, q_BxKxTxGxD, k_BxKxTxD, v_BxKxTxD):
  """``core`` on the grouped layouts, either at once or one (example, kv head) row at a time.

  Why row by row on CPU: XLA:CPU runs each op of the masked softmax (scores, max, exp, sum,
  and the backward's recompute, dp, ds) over the whole batch's score tensor, which at the
  toy shapes is several MB, larger than a core's L2, so each of those ~10 passes goes to
  memory. One row's scores (a [T, G, L] strip) stay in cache across them; the gain is
  largest where the score tensor is (full attention at the toy shape), ``python -m
  pallas_kernels.bench --cpu-rows`` measures it per shape. Same
  arithmetic per row, so the same values up to the order XLA picks within a row.
  ``per_row=None``: row by row on a one-device CPU target (``dispatch.one_cpu_device``) when
  the whole batch's ``scores`` (score elements) exceed ROW_BY_ROW_MIN_SCORE_BYTES as float32:
  on GPU and TPU the XLA path is a baseline whose rows should run in parallel, under a mesh
  of several devices the batch is sharded (a loop over it would gather it), and scores that
  fit in cache gain nothing from the loop."""
  if per_row is None:
    per_row = dispatch.one_cpu_device() and 4 * scores >= ROW_BY_ROW_MIN_SCORE_BYTES
  if not per_row:
    return core(q_BxKxTxGxD, k_BxKxTxD, v_BxKxTxD)
  b, n_kv = k_BxKxTxD.shape[:2]
  rows = lambda x: x.reshape((b * n_kv, 1, 1) + x.shape[2:])
  o_RxTxGxD = jax.lax.map(lambda qkv: core(*qkv)[0, 0],
                          (rows(q_BxKxTxGxD), rows(k_BxKxTxD), rows(v_BxKxTxD)))
  return o_RxTxGxD.reshape((b, n_kv) + o_RxTxGxD.shape[1:])


def sliding_window_attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, *, window: int, scale=None,
                             block_size: int | None = None, per_row: bool | None = None):
  """Causal attention where query i sees keys i - window < j <= i; GQA supported.
  ``per_row``: one (example, kv head) at a time (``_by_row``); None: on a one-device CPU."""
  t, d = q_BxTxHxD.shape[1], q_BxTxHxD.shape[3]
  scale = d ** -0.5 if scale is None else scale
  if window >= t:
    return full_causal_attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, scale=scale,
                                 block_size=block_size, per_row=per_row)
  c = block_size or default_block_size(t, window)
  core = lambda q, k, v: _sliding_window_core(q, k, v, window, scale, c, q_BxTxHxD.dtype)
  b, _, h, _ = q_BxTxHxD.shape
  strip = (math.ceil((window - 1) / c) + 1) * c              # keys a query block scores
  return _ungrouped(_by_row(core, per_row, b * h * math.ceil(t / c) * c * strip,
                            *_grouped(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD)))


def _sliding_window_core(q_BxKxTxGxD, k_BxKxTxD, v_BxKxTxD, window, scale, c, dtype):
  b, n_kv, t, g, d = q_BxKxTxGxD.shape
  n_back = math.ceil((window - 1) / c)          # earlier key blocks a query block can see
  n_blocks = math.ceil(t / c)
  t_pad = n_blocks * c
  pad = lambda x, front: jnp.pad(x, ((0, 0), (0, 0), (front, t_pad - t)) + ((0, 0),) * (x.ndim - 3))
  q_BxKxNxCxGxD = pad(q_BxKxTxGxD, 0).reshape(b, n_kv, n_blocks, c, g, d)
  k_BxKxMxCxD = pad(k_BxKxTxD, n_back * c).reshape(b, n_kv, n_blocks + n_back, c, d)
  v_BxKxMxCxD = pad(v_BxKxTxD, n_back * c).reshape(b, n_kv, n_blocks + n_back, c, d)
  # Strip of query block n: key blocks n .. n + n_back of the front-padded keys.
  strip = lambda x: jnp.concatenate([x[:, :, j:j + n_blocks] for j in range(n_back + 1)], axis=3)
  k_BxKxNxLxD, v_BxKxNxLxD = strip(k_BxKxMxCxD), strip(v_BxKxMxCxD)
  # Absolute positions: query n*c + i; key (n - n_back)*c + l.
  qpos = (jnp.arange(n_blocks)[:, None] * c + jnp.arange(c)[None, :])[:, :, None]
  kpos = ((jnp.arange(n_blocks)[:, None] - n_back) * c + jnp.arange((n_back + 1) * c)[None, :])[:, None, :]
  mask_NxCxL = (kpos <= qpos) & (kpos > qpos - window) & (kpos >= 0)
  o_BxKxNxCxGxD = _softmax_attend(q_BxKxNxCxGxD, k_BxKxNxLxD, v_BxKxNxLxD, mask_NxCxL, scale,
                                  dtype)
  return o_BxKxNxCxGxD.reshape(b, n_kv, t_pad, g, d)[:, :, :t]
