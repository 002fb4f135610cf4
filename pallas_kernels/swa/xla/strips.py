"""All query blocks at once, each against its strip of keys gathered per block: two batched
einsums, so the program stays the same size at any T. SWA's form on GPU and TPU, and on CPU
for many small blocks (``policy.block_by_block``). Row functions as in ``banded``."""

import math

import jax
import jax.numpy as jnp

from pallas_kernels.swa.xla.attend import attend_backward, attend_backward_kept, attend_forward


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


def strip_forward(q, k, v, *, window, scale, c, keep=False):
  """All query blocks at once, each against its strip of keys: two batched einsums, so the
  program stays the same size at any T. ``keep``: also the probabilities."""
  t = q.shape[1]
  o, lse, *kept = attend_forward(_blocked_q(q, c), *_strips(k, v, window, c),
                                 _strip_mask(t, window, c), scale, keep)
  return (_unblocked(o, t), _unblocked(lse, t), *kept)


def strip_backward(q, k, v, o, lse, do, *, window, scale, c, kept=None):
  t = q.shape[1]
  strips, pull_back = jax.vjp(lambda k, v: _strips(k, v, window, c), k.astype(jnp.float32),
                              v.astype(jnp.float32))
  if kept is None:
    dq, dk_strip, dv_strip = attend_backward(
        _blocked_q(q, c), *strips, _strip_mask(t, window, c), _blocked_q(o, c),
        _blocked_q(lse, c), _blocked_q(do, c), scale)
  else:
    dq, dk_strip, dv_strip = attend_backward_kept(
        _blocked_q(q, c), *strips, *kept, _blocked_q(o, c), _blocked_q(do, c), scale)
  return (_unblocked(dq, t), *pull_back((dk_strip, dv_strip)))
