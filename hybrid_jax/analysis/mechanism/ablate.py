"""Head ablation: the NIAH accuracy drop when the top-k retrieval heads are zeroed (or
set to a causal running mean of their output), against k random heads of the same layers."""

import numpy as np

from hybrid_jax.analysis.mechanism import forward as F
from hybrid_jax.analysis.mechanism.answers import answer_metrics


def plan_for(heads, mode: str) -> F.Plan:
  by_layer = {}
  for layer, h in heads:
    by_layer.setdefault(layer, []).append(h)
  return F.Plan(ablate=tuple((l, tuple(sorted(hs))) for l, hs in sorted(by_layer.items())),
                ablate_mode=mode)


def control_heads(model, heads, seed: int) -> list[tuple[int, int]]:
  """For each ablated (layer, head), another head of the same layer, drawn without
  replacement among the layer's heads that are not ablated (so the control removes the
  same number of heads per layer)."""
  rng = np.random.default_rng(seed)
  chosen = set(heads)
  out = []
  for layer, _ in heads:
    pool = [h for h in range(model.blocks[layer].mixer.n_heads) if (layer, h) not in chosen]
    if not pool:       # every head of the layer is ablated: no other head to control with
      raise ValueError(f"layer {layer}: all its heads are among the ablated ones; use a smaller k")
    h = int(rng.choice(pool))
    chosen.add((layer, h))
    out.append((layer, h))
  return out


def ablation(model, examples, heads, mode: str = "zero", seed: int = 0) -> dict:
  control = control_heads(model, heads, seed)
  base = answer_metrics(model, examples)
  top = answer_metrics(model, examples, plan_for(heads, mode))
  ctrl = answer_metrics(model, examples, plan_for(control, mode))
  return dict(mode=mode, heads=[list(h) for h in heads], control_heads=[list(h) for h in control],
              acc=dict(none=base["acc"], top=top["acc"], control=ctrl["acc"]),
              drop=dict(top=base["acc"] - top["acc"], control=base["acc"] - ctrl["acc"]),
              answer_loss=dict(none=base["answer_loss"], top=top["answer_loss"],
                               control=ctrl["answer_loss"]))
