"""Rotary position embedding (half-split convention) on [B, T, H, D] tensors."""

import jax.numpy as jnp


def apply_rope(x_BxTxHxD, positions_T, theta: float):
  d = x_BxTxHxD.shape[-1]
  half = d // 2
  freqs_F = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
  angles_TxF = positions_T.astype(jnp.float32)[:, None] * freqs_F[None, :]
  sin = jnp.sin(angles_TxF)[None, :, None, :]
  cos = jnp.cos(angles_TxF)[None, :, None, :]
  x = x_BxTxHxD.astype(jnp.float32)
  x1, x2 = x[..., :half], x[..., half:2 * half]
  rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., 2 * half:]], -1)
  return rotated.astype(x_BxTxHxD.dtype)
