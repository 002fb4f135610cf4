"""Per-token loss and argmax hits of a model, batched with a fixed number of rows.

Every forward pass of an evaluation goes through ``Scorer.score``: one jitted program per
input shape, reused for every checkpoint of a run (the params are an argument, not a
constant). Rows are padded to a fixed count so the last, partial batch compiles nothing new.
"""

import jax
import jax.numpy as jnp
import numpy as np

from hybrid_jax.flax_nnx import nnx


class Scorer:
  def __init__(self, graphdef, rest):
    def nll_and_hit(params, inputs_BxT, targets_BxT):
      logits_BxTxV = nnx.merge(graphdef, params, rest)(inputs_BxT)
      logp_BxTxV = jax.nn.log_softmax(logits_BxTxV, axis=-1)
      nll_BxT = -jnp.take_along_axis(logp_BxTxV, targets_BxT[..., None], axis=-1)[..., 0]
      hit_BxT = jnp.argmax(logits_BxTxV, axis=-1) == targets_BxT
      return nll_BxT, hit_BxT
    self._fn = jax.jit(nll_and_hit)

  def score(self, params, inputs_NxT, targets_NxT, rows: int):
    """(nll [N, T] float32, hit [N, T] bool) as numpy, computed ``rows`` sequences at a time."""
    inputs_NxT = np.asarray(inputs_NxT, np.int32)
    targets_NxT = np.asarray(targets_NxT, np.int32)
    n = inputs_NxT.shape[0]
    rows = max(1, min(rows, n))    # no padding beyond the data (one shape per (n, T) still)
    nll, hit = [], []
    for lo in range(0, n, rows):
      x, y = inputs_NxT[lo:lo + rows], targets_NxT[lo:lo + rows]
      pad = rows - x.shape[0]
      if pad:
        x = np.concatenate([x, np.repeat(x[:1], pad, axis=0)])
        y = np.concatenate([y, np.repeat(y[:1], pad, axis=0)])
      nll_BxT, hit_BxT = jax.device_get(self._fn(params, x, y))
      nll.append(nll_BxT[:rows - pad])
      hit.append(hit_BxT[:rows - pad])
    return np.concatenate(nll), np.concatenate(hit)


def shift_tokens(tokens_NxL, answer_mask_NxL):
  """Inputs = the tokens themselves (length L, not L-1: shapes stay round), targets = the
  next token, and a target mask that is True where the *target* is an answer token."""
  targets = np.zeros_like(tokens_NxL)
  targets[:, :-1] = tokens_NxL[:, 1:]
  mask = np.zeros_like(answer_mask_NxL, dtype=bool)
  mask[:, :-1] = answer_mask_NxL[:, 1:]
  return tokens_NxL, targets, mask
