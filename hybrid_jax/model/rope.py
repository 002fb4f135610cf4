"""Rotary position embedding (half-split convention) on [B, T, H, D] tensors."""

import jax.numpy as jnp
import numpy as np


def rope_tables(positions_T, d: int, theta: float):
  """(sin, cos) [T, d // 2]. Static positions (a numpy array: training, prefill) give
  constant tables, computed once here; traced ones (decoding, analyses) are computed in the
  program. Inside a jitted step XLA otherwise re-evaluated sin and cos per element in every
  fusion that reads them, forward and backward (5-13 ms a layer at d_model 256 on CPU)."""
  half = d // 2
  xp, dtype = (np, np.float64) if isinstance(positions_T, np.ndarray) else (jnp, jnp.float32)
  freqs_F = theta ** (-xp.arange(half, dtype=dtype) / half)
  angles_TxF = positions_T.astype(dtype)[:, None] * freqs_F[None, :]
  return xp.sin(angles_TxF).astype(np.float32), xp.cos(angles_TxF).astype(np.float32)


def apply_rope(x_BxTxHxD, positions_T, theta: float):
  d = x_BxTxHxD.shape[-1]
  half = d // 2
  sin_TxF, cos_TxF = rope_tables(positions_T, d, theta)
  sin, cos = sin_TxF[None, :, None, :], cos_TxF[None, :, None, :]
  x = x_BxTxHxD.astype(jnp.float32)
  x1, x2 = x[..., :half], x[..., half:2 * half]
  rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., 2 * half:]], -1)
  return rotated.astype(x_BxTxHxD.dtype)
