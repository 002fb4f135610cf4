"""Block by block: an unrolled loop over query blocks, each against the key blocks of its
band only (no work above the diagonal or below the band). CPU's form of full causal
attention, and of SWA when the blocks are few and large (``policy.block_by_block``).

Each row function takes q [E, T, G, D] and k, v [E, T, D] (E examples of one kv head and
its G query heads) and returns float32 (o [E, T, G, D], lse [E, T, G]), or the float32
gradients."""

import collections
import math

import jax.numpy as jnp

from pallas_kernels.swa.xla.attend import attend_backward, attend_backward_kept, attend_forward


def band_blocks(t: int, c: int, window: int):
  """(start, end, lo) per query block of c rows: its queries start..end-1 see keys lo..end-1,
  the key blocks that intersect its band (all earlier ones for full causal attention)."""
  n_back = math.ceil((window - 1) / c) if window < t else t
  return [(i * c, min((i + 1) * c, t), max(0, i - n_back) * c) for i in range(-(-t // c))]


def _block_mask(start, end, lo, window):
  kpos, qpos = jnp.arange(lo, end)[None, :], jnp.arange(start, end)[:, None]
  return (kpos <= qpos) & (kpos > qpos - window)


def banded_forward(q, k, v, *, window, scale, c, keep=False):
  """Query block by query block (unrolled: at most 16 blocks for full attention), each
  against the key blocks of its band only: no work above the diagonal or below the band.
  ``keep``: also returns each block's probabilities (``attend_forward``), a list."""
  blocks = [attend_forward(q[:, start:end], k[:, lo:end], v[:, lo:end],
                           _block_mask(start, end, lo, window), scale, keep)
            for start, end, lo in band_blocks(q.shape[1], c, window)]
  o, lse = (jnp.concatenate([b[i] for b in blocks], axis=1) for i in (0, 1))
  return (o, lse, [b[2] for b in blocks]) if keep else (o, lse)


def banded_backward(q, k, v, o, lse, do, *, window, scale, c, kept=None):
  t = q.shape[1]
  dq_blocks, dk_parts, dv_parts = [], collections.defaultdict(list), collections.defaultdict(list)
  for i, (start, end, lo) in enumerate(band_blocks(t, c, window)):
    rows = (q[:, start:end], k[:, lo:end], v[:, lo:end])
    if kept is None:
      dq, dk, dv = attend_backward(*rows, _block_mask(start, end, lo, window), o[:, start:end],
                                   lse[:, start:end], do[:, start:end], scale)
    else:
      dq, dk, dv = attend_backward_kept(*rows, *kept[i], o[:, start:end], do[:, start:end],
                                        scale)
    dq_blocks.append(dq)
    for key_start in range(lo, end, c):      # key block's share of this query block's dk
      dk_parts[key_start].append(dk[:, key_start - lo:key_start - lo + c])
      dv_parts[key_start].append(dv[:, key_start - lo:key_start - lo + c])
  total = lambda parts: jnp.concatenate([sum(parts[s][1:], parts[s][0]) for s in sorted(parts)],
                                        axis=1)
  return jnp.concatenate(dq_blocks, axis=1), total(dk_parts), total(dv_parts)
