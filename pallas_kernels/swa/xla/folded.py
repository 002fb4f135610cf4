"""Full causal attention on GPU and TPU: folded block pairs. The unrolled block loop
(``banded``) gives query block n its own key length (n + 1) c, so N blocks make N distinct
matmul shapes, and a GPU autotunes each: on an H200 the T=2048 forward (16 blocks) took 81 s
to compile. Folded, step p of a scan takes query blocks p and N - 1 - p, whose key blocks
are p + 1 and N - p, N + 1 block pairs in all at every step: one shape and the same causal
skipping (but for a padding block when N is odd: N + 1 more pairs). Each pair is a softmax
of its own, merged per query block by log-sum-exp; the backward is the unrolled loop's
flash-style one per pair, from the merged row log-sum-exp. Row functions as in ``banded``."""

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels.swa.xla.attend import attend_backward, attend_forward


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


def folded_forward(q, k, v, *, scale, c):
  t = q.shape[1]
  n, q_idx, k_idx, first = _fold_plan(t, c)
  qb, kb, vb = (_fold_blocks(x, n, c) for x in (q, k, v))

  def step(_, xs):
    qi, ki, fst = xs
    o, lse = attend_forward(jnp.take(qb, qi, axis=1), jnp.take(kb, ki, axis=1),
                            jnp.take(vb, ki, axis=1), _fold_pairs(c, qi, ki), scale)
    outs = []
    for mine in (fst, ~fst):       # merge each query block's pairs (log-sum-exp weights)
      lse_mine = jnp.where(mine[None, :, None, None], lse, -jnp.inf)      # [E, N+1, c, G]
      total = jax.nn.logsumexp(lse_mine, axis=1)
      outs.append((jnp.sum(jnp.exp(lse_mine - total[:, None])[..., None] * o, axis=1), total))
    return None, tuple(jnp.stack(x, axis=1) for x in zip(*outs))         # [E, 2, c, ...]

  _, (o, lse) = jax.lax.scan(step, None, (q_idx, k_idx, first))
  return _fold_unblock(o, t), _fold_unblock(lse, t)


def folded_backward(q, k, v, o, lse, do, *, scale, c):
  t = q.shape[1]
  n, q_idx, k_idx, first = _fold_plan(t, c)
  qb, kb, vb, ob, lseb, dob = (_fold_blocks(x, n, c) for x in (q, k, v, o, lse, do))

  def step(carry, xs):
    qi, ki, fst = xs
    at_q = lambda x: jnp.take(x, qi, axis=1)
    dq, dk, dv = attend_backward(at_q(qb), jnp.take(kb, ki, axis=1), jnp.take(vb, ki, axis=1),
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
