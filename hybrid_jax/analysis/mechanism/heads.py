"""Retrieval-head scores per (layer, head) on NIAH examples.

* mass: the attention probability the query row (by default the token just before the
  answer, ``answer_positions[0] - 1``; ``query_offset`` moves it earlier) puts on the
  needle's answer-value positions (``evidence_positions``), averaged over examples;
* copy (Wu et al. 2024): teacher-forced over the answer, +1/|answer| each time the head's
  most-attended key lies inside the needle value and holds the token being generated;
* entropy of the last ``ENTROPY_ROWS`` query rows, H = -sum p log p, and H / log(#keys).

Only the needed rows of each attention matrix are computed (``forward.attention_rows``).
"""

import numpy as np
from scipy.special import xlogy

from hybrid_jax.analysis.mechanism import forward as F

ENTROPY_ROWS = 4


def example_rows(ex, query_offset: int = 0) -> np.ndarray:
  """[query row, the rows generating each answer token, the last ENTROPY_ROWS rows]."""
  t = len(ex.tokens)
  if ex.answer_positions[0] - 1 - query_offset < 0:
    raise ValueError(f"query_offset {query_offset} is before the start of the example")
  return np.concatenate([[ex.answer_positions[0] - 1 - query_offset], ex.answer_positions - 1,
                         np.arange(t - ENTROPY_ROWS, t)]).astype(np.int32)


def row_entropy(p_HxRxT, rows_R, windows_H):
  """(H, H / log(#keys)) [H, R]: #keys = the keys the row can see, min(w, i + 1)."""
  ent = -xlogy(p_HxRxT, p_HxRxT).sum(-1)
  n_keys = np.minimum(np.asarray(windows_H)[:, None], np.asarray(rows_R)[None, :] + 1)
  with np.errstate(divide="ignore", invalid="ignore"):
    norm = np.where(n_keys > 1, ent / np.log(np.maximum(n_keys, 1)), 0.0)
  return ent, norm


def head_scores(model, examples, query_offset: int = 0, batch: int = 4, plan=F.Plan()) -> dict:
  """Per (layer, head) matrices [L, H] (NaN for recurrent layers): mass, copy, entropy,
  norm_entropy, each the mean over ``examples``."""
  n_layers, n_heads = len(model.blocks), max(
      (b.mixer.n_heads for b in model.blocks if F.is_attention(b)), default=0)
  keys = ("mass", "copy", "entropy", "norm_entropy")
  sums = {k: np.zeros((n_layers, n_heads)) for k in keys}
  rows = [example_rows(ex, query_offset) for ex in examples]
  groups = {}
  for i, r in enumerate(rows):                    # one forward shape per row count
    groups.setdefault(len(r), []).append(i)
  for idx in groups.values():
    for lo in range(0, len(idx), batch):
      part = idx[lo:lo + batch]
      tokens = np.stack([examples[i].tokens for i in part])
      rows_BxR = np.stack([rows[i] for i in part])
      probs = F.forward(model, tokens, rows_BxR, plan)["probs"]
      for layer, p in probs.items():
        p = np.asarray(p, np.float64)             # [B, H, R, T]
        windows = F.head_windows(model.blocks[layer].mixer, tokens.shape[1], plan)
        for b, i in enumerate(part):
          ex, p_HxRxT = examples[i], p[b]
          n_ans = len(ex.answer_positions)
          sums["mass"][layer] += p_HxRxT[:, 0, ex.evidence_positions].sum(-1)
          evidence = set(int(e) for e in ex.evidence_positions)
          top_HxA = p_HxRxT[:, 1:1 + n_ans].argmax(-1)
          for a, pos in enumerate(ex.answer_positions):
            target = ex.tokens[pos]
            hit = [int(j) in evidence and ex.tokens[j] == target for j in top_HxA[:, a]]
            sums["copy"][layer] += np.asarray(hit, float) / n_ans
          ent, norm = row_entropy(p_HxRxT[:, -ENTROPY_ROWS:], rows[i][-ENTROPY_ROWS:], windows)
          sums["entropy"][layer] += ent.mean(-1)
          sums["norm_entropy"][layer] += norm.mean(-1)
  recurrent = [not F.is_attention(b) for b in model.blocks]
  out = {}
  for k, s in sums.items():
    m = s / max(len(examples), 1)
    m[recurrent] = np.nan
    out[k] = m
  return out


def top_heads(scores: dict, k: int) -> list[tuple[int, int]]:
  """The k (layer, head) with the highest mass score (copy score breaks ties)."""
  mass = np.nan_to_num(scores["mass"], nan=-np.inf)
  copy = np.nan_to_num(scores["copy"], nan=-np.inf)
  order = np.lexsort((-copy.ravel(), -mass.ravel()))
  return [tuple(int(x) for x in np.unravel_index(i, mass.shape)) for i in order[:k]]
