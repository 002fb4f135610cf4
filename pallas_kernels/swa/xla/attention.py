"""The XLA path's two entry points: each takes its variant, query block, rows per loop step
and kept-or-recomputed backward from ``policy`` and runs the variant's row functions over
the batch (``rows.by_rows``)."""

import functools
import math

from pallas_kernels.swa.xla import policy
from pallas_kernels.swa.xla.banded import band_blocks, banded_backward, banded_forward
from pallas_kernels.swa.xla.folded import folded_backward, folded_forward
from pallas_kernels.swa.xla.rows import by_rows
from pallas_kernels.swa.xla.strips import strip_backward, strip_forward


def full_causal_attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, *, scale=None,
                          block_size: int | None = None, per_row: bool | None = None,
                          keep: bool | None = None, folded: bool | None = None):
  """Causal attention (the w >= T case) with causal block skipping: query block n attends
  only to the keys of blocks 0..n, so no work is spent above the diagonal. ``per_row``:
  rows at a time (True), the whole batch (False), or by ``policy.rows_per_step``'s rule
  (None). ``keep``: the backward reads the forward's probabilities (None: ``policy.keeps``'
  rule). ``folded``: block pairs folded into one shape (``folded``; None: ``policy.folds``,
  on GPU and TPU) rather than one unrolled block per shape (``banded``); it always
  recomputes its probabilities (``keep`` does not apply)."""
  b, t, h, d = q_BxTxHxD.shape
  scale = d ** -0.5 if scale is None else scale
  c = block_size or policy.causal_block_size(t, d)
  keys_per_query = sum((end - lo) * (end - start) for start, end, lo in band_blocks(t, c, t)) / t
  scores = b * h * t * keys_per_query
  rows = policy.rows_per_step(per_row, scores, b, k_BxTxKxD.shape[2], d)
  if policy.folds(folded):
    fns = [functools.partial(f, scale=scale, c=c) for f in (folded_forward, folded_backward)]
    return by_rows(*fns, rows, q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, False)
  fns = [functools.partial(f, window=t, scale=scale, c=c)
         for f in (banded_forward, banded_backward)]
  return by_rows(*fns, rows, q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, policy.keeps(keep, scores))


def sliding_window_attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, *, window: int, scale=None,
                             block_size: int | None = None, per_row: bool | None = None,
                             keep: bool | None = None):
  """Causal attention where query i sees keys i - window < j <= i; GQA supported.
  ``per_row``: rows at a time (True), the whole batch (False), or by
  ``policy.rows_per_step``'s rule (None: rows on a one-device CPU once the scores outgrow
  the cache). ``keep``: as in ``full_causal_attention``."""
  b, t, h, d = q_BxTxHxD.shape
  scale = d ** -0.5 if scale is None else scale
  if window >= t:
    return full_causal_attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, scale=scale,
                                 block_size=block_size, per_row=per_row, keep=keep)
  c = block_size or policy.default_block_size(t, window)
  strip = (math.ceil((window - 1) / c) + 1) * c              # keys a query block scores
  scores = b * h * math.ceil(t / c) * c * strip
  rows = policy.rows_per_step(per_row, scores, b, k_BxTxKxD.shape[2], d)
  pair = ((banded_forward, banded_backward) if policy.block_by_block(t, c)
          else (strip_forward, strip_backward))
  fns = [functools.partial(f, window=window, scale=scale, c=c) for f in pair]
  return by_rows(*fns, rows, q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, policy.keeps(keep, scores))
