"""Gradient influence: how strongly the target logits depend on each input embedding, as a
function of the distance back from the targets.

Targets: the last ``n_targets`` next-token predictions (rows T-1-n .. T-2, whose next token
is in the input); the objective is the sum of their true next-token logits. Distance of
input j: rows to the first target row, max(0, (T-1-n) - j). A model of n SWA layers of
window w cannot see beyond distance n (w - 1): its gradient there is exactly zero.
"""

import numpy as np

from hybrid_jax.analysis.mechanism import forward as F


def log_bins(max_distance: int) -> np.ndarray:
  """Bin edges 0, 1, 2, 4, 8, ... past ``max_distance`` (bin i = [e_i, e_{i+1}))."""
  edges = [0, 1]
  while edges[-1] <= max_distance:
    edges.append(edges[-1] * 2)
  return np.asarray(edges)


def influence(model, examples_tokens, n_targets: int, batch: int = 2) -> dict:
  """dict(per_distance [T-n]: mean gradient norm at each distance (over samples and the
  positions at that distance), bins: edges and the mean per log bin)."""
  tokens = np.asarray(examples_tokens)
  t = tokens.shape[1]
  first = t - 1 - n_targets
  norms = np.concatenate([np.asarray(F.input_influence(model, tokens[lo:lo + batch], n_targets))
                          for lo in range(0, len(tokens), batch)])          # [N, T]
  dist_T = np.maximum(0, first - np.arange(t))
  per_distance = np.array([norms[:, dist_T == d].mean() for d in range(first + 1)])
  edges = log_bins(first)
  binned = [float(per_distance[lo:min(hi, first + 1)].mean()) if lo <= first else float("nan")
            for lo, hi in zip(edges[:-1], edges[1:])]
  return dict(per_distance=per_distance.tolist(), bin_edges=edges.tolist(), binned=binned,
              n_targets=n_targets, length=t, samples=len(tokens))
