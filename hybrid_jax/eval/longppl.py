"""LongPPL (Fang et al., 2024): perplexity on the tokens that need long context.

On each held-out sequence x of length L (``eval.longppl_length``), for every target position
t (predicting x[t+1]):

* full-context loss: the loss of one forward pass over all L tokens, so x[0..t] is seen;
* truncated loss: x is cut into segments of W = ``eval.longppl_window`` tokens starting at
  multiples of W/2 (overlapping by half). Segment 0 scores positions 0..W-1; segment k >= 1
  scores only its second half, positions kW/2 + W/2 .. kW/2 + W - 1. So every position
  t >= W is predicted from the last W/2+1..W tokens only (t < W sees its whole, short,
  context either way, so its drop is ~0).

Key tokens are the positions whose loss drop (truncated - full) under the *reference*
model exceeds ``eval.longppl_threshold`` nats; the reference is another run's checkpoint
(``eval.reference``, ``eval.reference_step``) or, by default, the evaluated model itself.
LongPPL = exp(mean full-context loss of the evaluated model over the key tokens of all
sequences); ``log_longppl`` is that mean loss. ``long_loss`` is the mean full-context loss
over all positions, for comparison.
"""

import numpy as np

from hybrid_jax.eval.heldout import LONG_STREAM, heldout_rows


def segment_starts(length: int, window: int) -> np.ndarray:
  return np.arange(0, length - window + 1, window // 2)


def truncated_index(length: int, window: int):
  """(segment k, offset in segment) scoring each position t in 0..length-1."""
  half = window // 2
  t = np.arange(length)
  k = np.maximum(0, (t - half) // half)     # t in [kW/2 + W/2, kW/2 + W) -> k = t // half - 1
  return k, t - k * half


class LongPPLEval:
  def __init__(self, settings, data=None):
    """``data``: (inputs [R, L], targets [R, L]) of long text, or None (LongPPL off)."""
    self.settings, self.data = settings, data
    self._reference_keys = None

  @classmethod
  def from_config(cls, cfg, settings) -> "LongPPLEval":
    """On held-out rows of the run's own data source (see ``heldout``)."""
    data = None
    if settings.longppl_rows:
      data = heldout_rows(cfg, length=settings.longppl_length, rows=settings.longppl_rows,
                          seed=settings.seed, stream=LONG_STREAM)
    return cls(settings, data)

  def losses(self, scorer, params):
    """(full-context nll [R, L], truncated-context nll [R, L])."""
    s = self.settings
    inputs, targets = self.data
    r, length, w = inputs.shape[0], inputs.shape[1], s.longppl_window
    full, _ = scorer.score(params, inputs, targets, s.rows(length))
    starts = segment_starts(length, w)
    window_W = np.arange(w)
    seg_in = inputs[:, starts[:, None] + window_W[None]].reshape(-1, w)     # [R*S, W]
    seg_tg = targets[:, starts[:, None] + window_W[None]].reshape(-1, w)
    seg_nll, _ = scorer.score(params, seg_in, seg_tg, s.rows(w))
    seg_nll = seg_nll.reshape(r, len(starts), w)
    k, off = truncated_index(length, w)
    return full, seg_nll[:, k, off]

  def key_tokens(self, scorer, params) -> np.ndarray:
    full, trunc = self.losses(scorer, params)
    return (trunc - full) > self.settings.longppl_threshold

  def set_reference(self, scorer, params):
    """Fix the key tokens to those of a reference model (computed once)."""
    if self.data is not None:
      self._reference_keys = self.key_tokens(scorer, params)

  def __call__(self, scorer, params) -> dict:
    if self.data is None:
      return {}
    if self._reference_keys is None:
      full, trunc = self.losses(scorer, params)
      keys = (trunc - full) > self.settings.longppl_threshold
    else:
      inputs, targets = self.data
      full, _ = scorer.score(params, inputs, targets, self.settings.rows(inputs.shape[1]))
      keys = self._reference_keys
    n_keys = int(keys.sum())
    out = dict(long_loss=float(full.mean()), longppl_key_tokens=n_keys,
               longppl_key_fraction=n_keys / keys.size)
    if n_keys:
      log_ppl = float(full[keys].mean())
      out.update(log_longppl=log_ppl, longppl=float(np.exp(log_ppl)))
    else:       # no token needs long context under the reference: LongPPL is undefined
      out.update(log_longppl=None, longppl=None)
    return out
