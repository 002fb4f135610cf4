"""Blockwise sliding-window attention in plain XLA: O(T * w) time and memory.

Each query block of C positions attends only to the key blocks that intersect its band:
its own block and the ceil((w - 1) / C) blocks before it (all earlier blocks for full causal
attention); no T x T matrix is ever formed. Two forms of the same arithmetic: block by
block (an unrolled loop over query blocks, each against its slice of keys) and, for many
small SWA blocks, all blocks at once against key strips gathered per block (two batched
einsums). The backward is written by hand (flash-style), under one custom VJP around the
loop over (example, kv head) rows that the CPU path runs once the scores outgrow the cache;
on CPU it reads the forward's probabilities instead of recomputing them (``KEEP_MAX_BYTES``).
"""

import collections
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import cpu_matmul, dispatch


def default_block_size(t: int, window: int) -> int:
  """Half the window (each query block then reads a key strip of ~1.5 w; w gives 2 w), at
  least 16 rows, at most 256, at most T. ``python -m hybrid_jax.bench.kernels --cpu-blocks`` times
  it against half and twice it on XLA:CPU: at the toy SWA (w 32) 16-row blocks are 1.12-1.14x
  8-row and 1.17-1.27x 32-row ones; at d256 (D 64, w 128) 64 rows are 1.02-1.04x 32 rows and
  1.14x 128 rows."""
  block = max(window // 2, 16)
  return max(1, min(block, 256, t))


def _attend_forward(q_QxGxD, k_LxD, v_LxD, mask_QxL, scale, keep=False):
  """Masked softmax attention over leading batch axes: q [..., Q, G, D], k/v [..., L, D],
  mask [..., Q, L]. Returns the float32 output and the row log-sum-exp [..., Q, G]; with
  ``keep``, also the unnormalised probabilities and the rows' 1 / sum (for
  ``_attend_backward_kept``)."""
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


def _attend_backward(q, k, v, mask, o, lse, do, scale):
  """Flash-style gradients of ``_attend_forward`` (float32): the probabilities are recomputed
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
  toy 1.08x; in cache-loaded workers (``bench train --plain-dots``) much less (README)."""
  rows = lambda x: x.reshape(x.shape[:-3] + (x.shape[-3] * x.shape[-2], x.shape[-1]))
  out_DxL = cpu_matmul.matmul_tn(rows(x_QxGxD), rows(p_QxGxL))
  if cpu_matmul.fast_form():
    out_DxL = jax.lax.optimization_barrier(out_DxL)
  return jnp.swapaxes(out_DxL, -1, -2)


def _attend_backward_kept(q, k, v, p, inv_l, o, do, scale):
  """``_attend_backward`` from the forward's kept probabilities ``p`` [..., Q, G, L]
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


def causal_block_size(t: int, head_dim: int = 16) -> int:
  """Query blocks of >= 64 rows (128 at head dim >= 64), at most 16 of them: skipping the
  key blocks above the diagonal saves (N - 1) / 2N of the work, and few blocks keep the
  program small. At the toy shapes (D 16, T 256) 64-row score tiles stay in cache and the
  causal saving grows (``bench --cpu-blocks``: 1.22-1.25x over 128 rows, 1.10-1.11x over 32).
  At D 64 the attention op alone is even between 64 and 128 rows (``--cpu-blocks``: 0.99-1.00x)
  and 1.11x faster than with 256; 128 rows were taken for the whole d256 train step, 1.3-3.1%
  faster at B 8 (two runs) and 1.4% at B 4 in an in-process A/B of single steps (issue 19's
  notes; ``hybrid-jax bench train`` cannot resolve a step difference that small)."""
  return max(128 if head_dim >= 64 else 64, -(-t // 16))


# --- one (example, kv head) row's attention, forward and backward -------------------------
# Each takes q [E, T, G, D] and k, v [E, T, D] (E examples of one kv head and its G query
# heads) and returns float32 (o [E, T, G, D], lse [E, T, G]), or the float32 gradients.

def _band_blocks(t: int, c: int, window: int):
  """(start, end, lo) per query block of c rows: its queries start..end-1 see keys lo..end-1,
  the key blocks that intersect its band (all earlier ones for full causal attention)."""
  n_back = math.ceil((window - 1) / c) if window < t else t
  return [(i * c, min((i + 1) * c, t), max(0, i - n_back) * c) for i in range(-(-t // c))]


def _block_mask(start, end, lo, window):
  kpos, qpos = jnp.arange(lo, end)[None, :], jnp.arange(start, end)[:, None]
  return (kpos <= qpos) & (kpos > qpos - window)


def _banded_forward(q, k, v, *, window, scale, c, keep=False):
  """Query block by query block (unrolled: at most 16 blocks for full attention), each
  against the key blocks of its band only: no work above the diagonal or below the band.
  ``keep``: also returns each block's probabilities (``_attend_forward``), a list."""
  blocks = [_attend_forward(q[:, start:end], k[:, lo:end], v[:, lo:end],
                            _block_mask(start, end, lo, window), scale, keep)
            for start, end, lo in _band_blocks(q.shape[1], c, window)]
  o, lse = (jnp.concatenate([b[i] for b in blocks], axis=1) for i in (0, 1))
  return (o, lse, [b[2] for b in blocks]) if keep else (o, lse)


def _banded_backward(q, k, v, o, lse, do, *, window, scale, c, kept=None):
  t = q.shape[1]
  dq_blocks, dk_parts, dv_parts = [], collections.defaultdict(list), collections.defaultdict(list)
  for i, (start, end, lo) in enumerate(_band_blocks(t, c, window)):
    rows = (q[:, start:end], k[:, lo:end], v[:, lo:end])
    if kept is None:
      dq, dk, dv = _attend_backward(*rows, _block_mask(start, end, lo, window), o[:, start:end],
                                    lse[:, start:end], do[:, start:end], scale)
    else:
      dq, dk, dv = _attend_backward_kept(*rows, *kept[i], o[:, start:end], do[:, start:end],
                                         scale)
    dq_blocks.append(dq)
    for key_start in range(lo, end, c):      # key block's share of this query block's dk
      dk_parts[key_start].append(dk[:, key_start - lo:key_start - lo + c])
      dv_parts[key_start].append(dv[:, key_start - lo:key_start - lo + c])
  total = lambda parts: jnp.concatenate([sum(parts[s][1:], parts[s][0]) for s in sorted(parts)],
                                        axis=1)
  return jnp.concatenate(dq_blocks, axis=1), total(dk_parts), total(dv_parts)


# Full causal attention on GPU and TPU: folded block pairs (``_folded_*``). The unrolled
# block loop above gives query block n its own key length (n + 1) c, so N blocks make N
# distinct matmul shapes, and a GPU autotunes each: on an H200 the T=2048 forward (16 blocks)
# took 81 s to compile. Folded, step p of a scan takes query blocks p and N - 1 - p, whose
# key blocks are p + 1 and N - p, N + 1 block pairs in all at every step: one shape and the
# same causal skipping (but for a padding block when N is odd: N + 1 more pairs). Each pair
# is a softmax of its own, merged per query block by log-sum-exp; the backward is the
# unrolled loop's flash-style one per pair, from the merged row log-sum-exp.


def _fold_plan(t: int, c: int):
  """(N, query block, key block, first-of-the-pair flag), the last three [N / 2, N + 1] numpy
  arrays: step p's block pairs, (p, 0..p) then (N - 1 - p, 0..N - 1 - p); N even (a padding
  block when ceil(T / c) is odd)."""
  n = -(-t // c)
  n += n % 2
  step, pair = np.arange(n // 2)[:, None], np.arange(n + 1)[None, :]
  first = pair <= step
  return n, np.where(first, step, n - 1 - step), np.where(first, pair, pair - step - 1), first


def _fold_blocks(x_ExTx___, n, c):
  """[E, T, ...] -> [E, N, c, ...], zero-padded at the end."""
  e, t = x_ExTx___.shape[:2]
  pad = [(0, 0), (0, n * c - t)] + [(0, 0)] * (x_ExTx___.ndim - 2)
  return jnp.pad(x_ExTx___, pad).reshape((e, n, c) + x_ExTx___.shape[2:])


def _unblock(x_ExNxCx___, t):
  """Inverse of ``_fold_blocks``: [E, N, c, ...] -> [E, T, ...]."""
  return x_ExNxCx___.reshape((x_ExNxCx___.shape[0], -1) + x_ExNxCx___.shape[3:])[:, :t]


def _fold_unblock(x_NhalfxEx2xCx___, t):
  """Steps' outputs [N / 2, E, 2, c, ...] (blocks p and N - 1 - p) -> [E, T, ...] in order."""
  first, second = x_NhalfxEx2xCx___[:, :, 0], x_NhalfxEx2xCx___[::-1, :, 1]
  return _unblock(jnp.moveaxis(jnp.concatenate([first, second], axis=0), 0, 1), t)


def _fold_pairs(c, q_idx, k_idx):
  """The causal mask of a step's block pairs: [N + 1, c (queries), c (keys)]."""
  i = jnp.arange(c)
  return k_idx[:, None, None] * c + i[None, None, :] <= q_idx[:, None, None] * c + i[None, :, None]


def _folded_forward(q, k, v, *, scale, c):
  t = q.shape[1]
  n, q_idx, k_idx, first = _fold_plan(t, c)
  qb, kb, vb = (_fold_blocks(x, n, c) for x in (q, k, v))

  def step(_, xs):
    qi, ki, fst = xs
    o, lse = _attend_forward(jnp.take(qb, qi, axis=1), jnp.take(kb, ki, axis=1),
                             jnp.take(vb, ki, axis=1), _fold_pairs(c, qi, ki), scale)
    outs = []
    for mine in (fst, ~fst):       # merge each query block's pairs (log-sum-exp weights)
      lse_mine = jnp.where(mine[None, :, None, None], lse, -jnp.inf)      # [E, N+1, c, G]
      total = jax.nn.logsumexp(lse_mine, axis=1)
      outs.append((jnp.sum(jnp.exp(lse_mine - total[:, None])[..., None] * o, axis=1), total))
    return None, tuple(jnp.stack(x, axis=1) for x in zip(*outs))         # [E, 2, c, ...]

  _, (o, lse) = jax.lax.scan(step, None, (q_idx, k_idx, first))
  return _fold_unblock(o, t), _fold_unblock(lse, t)


def _folded_backward(q, k, v, o, lse, do, *, scale, c):
  t = q.shape[1]
  n, q_idx, k_idx, first = _fold_plan(t, c)
  qb, kb, vb, ob, lseb, dob = (_fold_blocks(x, n, c) for x in (q, k, v, o, lse, do))

  def step(carry, xs):
    qi, ki, fst = xs
    at_q = lambda x: jnp.take(x, qi, axis=1)
    dq, dk, dv = _attend_backward(at_q(qb), jnp.take(kb, ki, axis=1), jnp.take(vb, ki, axis=1),
                                  _fold_pairs(c, qi, ki), at_q(ob), at_q(lseb), at_q(dob), scale)
    dq = jnp.stack([jnp.sum(jnp.where(mine[None, :, None, None, None], dq, 0.0), axis=1)
                    for mine in (fst, ~fst)], axis=1)                      # [E, 2, c, G, D]
    # Each pair's key-block gradient into its block: a one-hot matmul, not a scatter-add
    # (whose order of additions a GPU need not keep: results would vary run to run).
    # HIGHEST: adds in float32, as the unrolled blocks' sums do (a GPU's default is TF32,
    # a TPU's one bf16 pass).
    to_block = (ki[:, None] == jnp.arange(n)[None, :]).astype(jnp.float32)   # [N+1, N]
    add = lambda acc, x: acc + jnp.einsum("pn,epcd->encd", to_block, x,
                                          precision=jax.lax.Precision.HIGHEST)
    return (add(carry[0], dk), add(carry[1], dv)), dq

  zeros = jnp.zeros(kb.shape, jnp.float32)
  (dk, dv), dq = jax.lax.scan(step, (zeros, zeros), (q_idx, k_idx, first))
  return _fold_unblock(dq, t), _unblock(dk, t), _unblock(dv, t)


# SWA on CPU block by block (``_banded_*``, which also skips the padding before the first
# key) when the blocks are few and large, else all blocks at once over key strips
# (``_strip_*``): measured once on one core (issue 19's notes), at d256 (8 blocks of 64 rows)
# banded 46 ms against strips 51 ms; at the toy SWA (16 blocks of 16 rows) strips 1.2-1.3x
# faster (the ops per block dominate there). For GPU and TPU always strips: one block shape
# for the compiler to tune.
BANDED_MIN_BLOCK, BANDED_MAX_BLOCKS = 32, 16


def _strips(k_ExTxD, v_ExTxD, window, c):
  """Keys and values of query block n's band, gathered into one strip per block:
  [E, N, (n_back + 1) * c, D], key blocks n - n_back .. n of the front-padded sequence."""
  e, t, d = k_ExTxD.shape
  n_back, n_blocks = math.ceil((window - 1) / c), math.ceil(t / c)
  def strip(x):
    x = jnp.pad(x, ((0, 0), (n_back * c, n_blocks * c - t), (0, 0)))
    x = x.reshape(e, n_blocks + n_back, c, d)
    return jnp.concatenate([x[:, j:j + n_blocks] for j in range(n_back + 1)], axis=2)
  return strip(k_ExTxD), strip(v_ExTxD)


def _strip_mask(t, window, c):
  n_back, n_blocks = math.ceil((window - 1) / c), math.ceil(t / c)
  qpos = (jnp.arange(n_blocks)[:, None] * c + jnp.arange(c)[None, :])[:, :, None]
  kpos = ((jnp.arange(n_blocks)[:, None] - n_back) * c
          + jnp.arange((n_back + 1) * c)[None, :])[:, None, :]
  return (kpos <= qpos) & (kpos > qpos - window) & (kpos >= 0)        # [N, C, L]


def _blocked_q(x_ExTx___, c):
  """[E, T, ...] -> [E, N, C, ...], zero-padded to whole blocks."""
  e, t = x_ExTx___.shape[:2]
  n_blocks = math.ceil(t / c)
  x = jnp.pad(x_ExTx___, ((0, 0), (0, n_blocks * c - t)) + ((0, 0),) * (x_ExTx___.ndim - 2))
  return x.reshape((e, n_blocks, c) + x_ExTx___.shape[2:])


def _unblocked(x_ExNxCx___, t):
  e, n, c = x_ExNxCx___.shape[:3]
  return x_ExNxCx___.reshape((e, n * c) + x_ExNxCx___.shape[3:])[:, :t]


def _strip_forward(q, k, v, *, window, scale, c, keep=False):
  """All query blocks at once, each against its strip of keys: two batched einsums, so the
  program stays the same size at any T. ``keep``: also the probabilities."""
  t = q.shape[1]
  o, lse, *kept = _attend_forward(_blocked_q(q, c), *_strips(k, v, window, c),
                                  _strip_mask(t, window, c), scale, keep)
  return (_unblocked(o, t), _unblocked(lse, t), *kept)


def _strip_backward(q, k, v, o, lse, do, *, window, scale, c, kept=None):
  t = q.shape[1]
  strips, pull_back = jax.vjp(lambda k, v: _strips(k, v, window, c), k.astype(jnp.float32),
                              v.astype(jnp.float32))
  if kept is None:
    dq, dk_strip, dv_strip = _attend_backward(
        _blocked_q(q, c), *strips, _strip_mask(t, window, c), _blocked_q(o, c),
        _blocked_q(lse, c), _blocked_q(do, c), scale)
  else:
    dq, dk_strip, dv_strip = _attend_backward_kept(
        _blocked_q(q, c), *strips, *kept, _blocked_q(o, c), _blocked_q(do, c), scale)
  return (_unblocked(dq, t), *pull_back((dk_strip, dv_strip)))


# --- the loop over rows ------------------------------------------------------------------------

# Rows at a time pay once the batch's float32 scores outgrow a core's cache (L2: 1 MB a core
# here): XLA:CPU runs each op of the masked softmax over a whole tensor, so one row's strip
# stays in cache across the ~10 passes over it where the batch's goes to memory. ``python -m
# hybrid_jax.bench.kernels --cpu-rows`` (one core, rows against the whole batch): toy full
# attention (5 MB) 1.55x, toy-B4 full (2.5 MB) 1.35x, d256 SWA / full (12 / 18 MB) 1.47x /
# 1.71x, d256-B4 full (9 MB) 1.63x; below the threshold even (toy SWA 1.5 MB: 0.98-1.02x);
# the one loss is d256-B4 SWA (6 MB, 0.92x), left to the rule.
# On more than one core the loop pays only for small heads: at head dim >= 64 the whole
# batch made the two-thread d256 train step 6-8% faster (d256, d256-SSSF, d256-B4), at head
# dim 16 the loop stayed 2-7% ahead (toy, toy-8L, toy-SSSF; in-process A/Bs of whole steps,
# issue 19's notes), though on the op alone the loop still wins at d256 full attention
# (``--cpu-rows`` on two cores: 1.40x). Our reading: a loop is one sequential op in the
# program, and the whole batch's attention can overlap with other work on the second core.
ROW_BY_ROW_MIN_SCORE_BYTES = 9 * 2 ** 18          # 2.25 MB: below it, the whole batch at once
ROW_SCORE_BYTES = 2 ** 20                         # 1 MB: rows per loop step, up to this much
MULTICORE_ROWS_MAX_HEAD_DIM = 32                  # on several cores, the loop only up to this


# On CPU the forward keeps its probabilities for the backward up to this many bytes (float32,
# per call; a row loop stacks its steps'), instead of the flash-style recomputation: one
# score matmul and one exp fewer, for one score-sized write and read. Memory is what a CPU
# has; on GPU and TPU the XLA path is a baseline for the kernels, which recompute, and keeps
# their memory.
KEEP_MAX_BYTES = 2 ** 26                          # 64 MB: d256 at T 512, B 8 keeps 21 MB


def _keeps(keep, scores):
  """Whether a call keeps its probabilities (``keep=None``: by KEEP_MAX_BYTES, CPU only)."""
  if keep is None:
    keep = dispatch.target_platform() == "cpu" and 4 * scores <= KEEP_MAX_BYTES
  return keep


def _rows_per_step(per_row, scores, b, n_kv, head_dim):
  """How many (example, kv head) rows one loop step takes (b * n_kv: the whole batch, no
  loop). ``per_row=None``: rows on a one-device CPU target (``dispatch.one_cpu_device``) once
  the whole batch's ``scores`` (score elements) exceed ROW_BY_ROW_MIN_SCORE_BYTES as float32,
  as many as fit ROW_SCORE_BYTES; on several cores (``dispatch.cpu_threads``) only up to
  MULTICORE_ROWS_MAX_HEAD_DIM. On GPU and TPU the XLA path is a baseline whose rows
  should run in parallel, and under a mesh of several devices the batch is sharded (a loop
  over it would gather it), except inside a shard_map over every axis (each device's own
  rows: CPU data parallelism, ``hybrid_jax.train.step.flat_data_parallel``)."""
  if per_row is None:
    per_row = (dispatch.one_cpu_device() and 4 * scores >= ROW_BY_ROW_MIN_SCORE_BYTES
               and (dispatch.cpu_threads() == 1 or head_dim <= MULTICORE_ROWS_MAX_HEAD_DIM))
  if not per_row:
    return b * n_kv
  return min(b * n_kv, max(1, int(ROW_SCORE_BYTES // max(4 * scores / (b * n_kv), 1))))


def _by_rows(forward, backward, rows, q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, keep=False):
  """``forward`` / ``backward`` (a row function pair above) over the batch, ``rows`` (example,
  kv head) rows per loop step (all of them: no loop), under one custom VJP: the backward is
  one loop over the rows too, and keeps only q, k, v, the output and the row log-sum-exp
  (and with ``keep`` the probabilities).
  Differentiating through the loop instead (``jax.lax.map``, the path before this one) stacked
  every row's residuals (the key strips, 3x the keys at d256) and zero-filled and transposed
  them (measured against that path in one process, figures in issue 19's notes: the d256 op
  1.4-1.5x faster, the whole d256 step 1.4-1.7%).

  The whole batch is regrouped kv-head-major ([B * K, T, ...]) for one call of the row
  functions; a loop step's few kv heads are called one by one on static slices instead
  (regrouping inside the loop made toy full attention 1.4x slower).

  ``keep``: the forward keeps its probabilities for the backward (``_attend_backward_kept``;
  a loop stacks its steps' in one buffer) instead of the backward recomputing them."""
  b, t, h, d = q_BxTxHxD.shape
  n_kv = k_BxTxKxD.shape[2]
  g = h // n_kv
  heads = n_kv if rows >= n_kv else max(x for x in range(1, rows + 1) if n_kv % x == 0)
  examples = max(x for x in range(1, max(rows // n_kv, 1) + 1) if b % x == 0)
  n_steps = (b // examples) * (n_kv // heads)

  def corner(step, per_head):    # first example and head index of a loop step's slice
    return ((step // (n_kv // heads)) * examples, (step % (n_kv // heads)) * heads * per_head)

  def take(x, step, per_head):
    """Loop step ``step``'s rows of a [B, T, kv heads * per_head, ...] tensor: a list of
    [E, T, per_head, ...], one entry per call of the row functions."""
    if n_steps == 1:                                         # regroup: one call
      x = x.reshape((b, t, n_kv, per_head) + x.shape[3:])
      return [jnp.moveaxis(x, 2, 1).reshape((b * n_kv, t, per_head) + x.shape[4:])]
    e0, h0 = corner(step, per_head)
    x = jax.lax.dynamic_slice(x, (e0, 0, h0) + (0,) * (x.ndim - 3),
                              (examples, t, heads * per_head) + x.shape[3:])
    return [x[:, :, j * per_head:(j + 1) * per_head] for j in range(heads)]

  def put(buf, xs, step, per_head):
    """Inverse of ``take``: the calls' outputs back into ``buf``
    [B, T, kv heads * per_head, ...]."""
    if n_steps == 1:
      x = xs[0].reshape((b, n_kv, t, per_head) + xs[0].shape[3:])
      return jnp.moveaxis(x, 1, 2).reshape(buf.shape).astype(buf.dtype)
    e0, h0 = corner(step, per_head)
    x = jnp.concatenate(xs, axis=2).astype(buf.dtype)
    return jax.lax.dynamic_update_slice(buf, x, (e0, 0, h0) + (0,) * (x.ndim - 3))

  take_kv = lambda x, step: [y[:, :, 0] for y in take(x, step, 1)]       # [E, T, D] each
  put_kv = lambda buf, xs, step: put(buf, [x[:, :, None] for x in xs], step, 1)

  def loop(body, init):
    return body(0, init) if n_steps == 1 else jax.lax.fori_loop(0, n_steps, body, init)

  def forward_loop(q, k, v, keep=False):
    """(o, lse), and with ``keep`` the calls' kept probabilities: a list, one entry per call
    of a loop step, each leaf stacked over the loop steps (a leading axis of 1 without one)."""
    def calls(step, q, k, v):
      return [forward(*row, **({"keep": True} if keep else {}))
              for row in zip(take(q, step, g), take_kv(k, step), take_kv(v, step))]
    def body(step, carry):
      outs = calls(step, q, k, v)
      o_lse = (put(carry[0], [out[0] for out in outs], step, g),
               put(carry[1], [out[1] for out in outs], step, g))
      if not keep:
        return o_lse
      kept = [out[2] for out in outs]
      return o_lse + ((jax.tree.map(lambda x: x[None], kept) if n_steps == 1 else
                       jax.tree.map(lambda buf, x: buf.at[step].set(x), carry[2], kept)),)
    init = (jnp.zeros_like(q), jnp.zeros((b, t, h), jnp.float32))
    if keep and n_steps > 1:
      one = jax.eval_shape(lambda *a: [out[2] for out in calls(0, *a)], q, k, v)
      init += (jax.tree.map(lambda x: jnp.zeros((n_steps,) + x.shape, x.dtype), one),)
    return loop(body, init)

  @jax.custom_vjp
  def attend(q, k, v):
    return forward_loop(q, k, v)[0]

  def attend_fwd(q, k, v):
    o, lse, *kept = forward_loop(q, k, v, keep)
    return o, (q, k, v, o, lse, kept)

  def attend_bwd(res, do):
    q, k, v, o, lse, kept = res
    def body(step, carry):
      rows = list(zip(take(q, step, g), take_kv(k, step), take_kv(v, step), take(o, step, g),
                      take(lse, step, g), take(do, step, g)))
      kws = ([{"kept": jax.tree.map(lambda buf: buf[step], x)} for x in kept[0]] if kept
             else [{}] * len(rows))
      grads = [backward(*row, **kw) for row, kw in zip(rows, kws)]
      return (put(carry[0], [dq for dq, _, _ in grads], step, g),
              put_kv(carry[1], [dk for _, dk, _ in grads], step),
              put_kv(carry[2], [dv for _, _, dv in grads], step))
    return loop(body, (jnp.zeros_like(q), jnp.zeros_like(k), jnp.zeros_like(v)))

  attend.defvjp(attend_fwd, attend_bwd)
  return attend(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD)


def full_causal_attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, *, scale=None,
                          block_size: int | None = None, per_row: bool | None = None,
                          keep: bool | None = None, folded: bool | None = None):
  """Causal attention (the w >= T case) with causal block skipping: query block n attends
  only to the keys of blocks 0..n, so no work is spent above the diagonal. ``per_row``:
  rows at a time (True), the whole batch (False), or by ``_rows_per_step``'s rule (None).
  ``keep``: the backward reads the forward's probabilities (None: ``_keeps``' rule).
  ``folded``: block pairs folded into one shape (``_folded_*``; None: on GPU and TPU) rather
  than one unrolled block per shape (CPU, where the unrolled blocks measured faster); it
  always recomputes its probabilities (``keep`` does not apply)."""
  b, t, h, d = q_BxTxHxD.shape
  scale = d ** -0.5 if scale is None else scale
  c = block_size or causal_block_size(t, d)
  keys_per_query = sum((end - lo) * (end - start) for start, end, lo in _band_blocks(t, c, t)) / t
  scores = b * h * t * keys_per_query
  rows = _rows_per_step(per_row, scores, b, k_BxTxKxD.shape[2], d)
  if folded is None:
    folded = dispatch.target_platform() != "cpu"
  if folded:
    fns = [functools.partial(f, scale=scale, c=c) for f in (_folded_forward, _folded_backward)]
    return _by_rows(*fns, rows, q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, False)
  fns = [functools.partial(f, window=t, scale=scale, c=c)
         for f in (_banded_forward, _banded_backward)]
  return _by_rows(*fns, rows, q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, _keeps(keep, scores))


def sliding_window_attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, *, window: int, scale=None,
                             block_size: int | None = None, per_row: bool | None = None,
                             keep: bool | None = None):
  """Causal attention where query i sees keys i - window < j <= i; GQA supported.
  ``per_row``: rows at a time (True), the whole batch (False), or by ``_rows_per_step``'s
  rule (None: rows on a one-device CPU once the scores outgrow the cache). ``keep``: as in
  ``full_causal_attention``."""
  b, t, h, d = q_BxTxHxD.shape
  scale = d ** -0.5 if scale is None else scale
  if window >= t:
    return full_causal_attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, scale=scale,
                                 block_size=block_size, per_row=per_row, keep=keep)
  c = block_size or default_block_size(t, window)
  strip = (math.ceil((window - 1) / c) + 1) * c              # keys a query block scores
  scores = b * h * math.ceil(t / c) * c * strip
  rows = _rows_per_step(per_row, scores, b, k_BxTxKxD.shape[2], d)
  banded = (dispatch.target_platform() == "cpu" and c >= BANDED_MIN_BLOCK
            and math.ceil(t / c) <= BANDED_MAX_BLOCKS)
  pair = (_banded_forward, _banded_backward) if banded else (_strip_forward, _strip_backward)
  fns = [functools.partial(f, window=window, scale=scale, c=c) for f in pair]
  return _by_rows(*fns, rows, q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, _keeps(keep, scores))
