"""Retrieval heads traced over training: the final checkpoint's top-k heads, scored at every
saved checkpoint (retrieval mass, attention entropy of the last query rows) and the distance
of their Q and K projection weights (the head's slice; for K its kv group's) to a reference
checkpoint, against training tokens."""

import numpy as np

from hybrid_jax.analysis.mechanism import heads as heads_lib


def qk_slices(model, layer: int, head: int):
  """(W_q [D, Dh], W_k [D, Dh]) of one query head and its kv head."""
  mixer = model.blocks[layer].mixer
  dh, group = mixer.head_dim, mixer.n_heads // mixer.n_kv_heads
  wq = np.asarray(mixer.q_proj.kernel[...])[:, head * dh:(head + 1) * dh]
  g = head // group
  wk = np.asarray(mixer.k_proj.kernel[...])[:, g * dh:(g + 1) * dh]
  return wq, wk


def weight_distance(model, reference, layer: int, head: int) -> dict:
  out = {}
  for name, w, w_ref in zip(("q", "k"), qk_slices(model, layer, head),
                            qk_slices(reference, layer, head)):
    l2 = float(np.linalg.norm(w - w_ref))
    out[f"{name}_l2"] = l2
    out[f"{name}_rel_l2"] = l2 / max(float(np.linalg.norm(w_ref)), 1e-30)
  return out


def trace_run(run, examples, k: int, reference_step: int | None = None, query_offset: int = 0,
              log=lambda s: None, layers: str | None = None) -> dict:
  """Per checkpoint and top head: mass, entropy, norm_entropy, q/k (relative) L2. ``layers``
  (pattern letters, e.g. "F") picks the top heads among those layers only."""
  final = run.steps[-1]
  reference_step = final if reference_step is None else reference_step
  final_model = run.model(final)
  scores = heads_lib.head_scores(final_model, examples, query_offset)
  if layers:
    keep = np.array([b.letter in layers for b in final_model.blocks])
    scores = {key: np.where(keep[:, None], v, np.nan) for key, v in scores.items()}
  top = heads_lib.top_heads(scores, k)
  reference = final_model if reference_step == final else run.model(reference_step)
  points = []
  for step in run.steps:
    model = final_model if step == final else run.model(step)
    scores = heads_lib.head_scores(model, examples, query_offset)
    per_head = []
    for layer, h in top:
      rec = dict(layer=layer, head=h, **{key: float(scores[key][layer, h])
                                         for key in ("mass", "copy", "entropy", "norm_entropy")})
      rec.update(weight_distance(model, reference, layer, h))
      per_head.append(rec)
    points.append(dict(step=step, tokens=run.tokens(step), heads=per_head))
    log(f"step {step}: mean mass {np.mean([r['mass'] for r in per_head]):.3f}")
  return dict(run=str(run.path), top_heads=[list(h) for h in top], reference_step=reference_step,
              points=points)
