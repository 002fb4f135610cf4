"""optax AdamW with warmup + cosine / WSD / constant schedules and global-norm clipping."""

import jax
import optax

from hybrid_jax.train.config import TrainConfig


def make_schedule(t, total_steps: int):
  peak, floor = t.lr, t.lr * t.min_lr_ratio
  warmup = min(t.warmup_steps, max(total_steps - 1, 0))
  if t.schedule == "cosine":
    return optax.warmup_cosine_decay_schedule(0.0, peak, warmup, max(total_steps, warmup + 1), floor)
  warm = optax.linear_schedule(0.0, peak, max(warmup, 1))
  if t.schedule == "constant":
    return optax.join_schedules([warm, optax.constant_schedule(peak)], [warmup])
  # wsd: warmup, stable at peak, then linear decay to the floor over the last decay_fraction
  decay_steps = max(1, round(t.decay_fraction * total_steps))
  stable_end = max(warmup, total_steps - decay_steps)
  return optax.join_schedules(
      [warm, optax.constant_schedule(peak), optax.linear_schedule(peak, floor, decay_steps)],
      [warmup, stable_end])


def make_optimizer(t, total_steps: int):
  """``t``: the resolved ``train`` section, or its TrainConfig."""
  t = TrainConfig.from_config(t)
  schedule = make_schedule(t, total_steps)
  tx = optax.chain(
      optax.clip_by_global_norm(t.grad_clip),
      optax.adamw(schedule, b1=t.b1, b2=t.b2, weight_decay=t.weight_decay,
                  mask=lambda params: _decay_mask(params)))
  return tx, schedule


def _decay_mask(params):
  """Decay matrices only (not norm scales)."""
  return jax.tree.map(lambda p: p.ndim >= 2, params)
