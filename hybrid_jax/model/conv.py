"""Short causal depthwise convolution (Mamba-2, Gated DeltaNet), with its decoding state."""

import jax.numpy as jnp

from hybrid_jax.flax_nnx import nnx


def short_conv_param_count(channels: int, kernel: int, bias: bool) -> int:
  return channels * kernel + (channels if bias else 0)


class ShortConv(nnx.Module):
  """y_t = sum_j w_j * x_{t-j} (+ b), per channel: a causal window of ``kernel`` tokens."""

  def __init__(self, channels: int, kernel: int, *, bias: bool, rngs: nnx.Rngs):
    self.kernel_size = kernel
    self.kernel = nnx.Param(nnx.initializers.uniform(2 / kernel)(rngs.params(), (kernel, channels))
                            - 1 / kernel)
    self.bias = nnx.Param(jnp.zeros((channels,))) if bias else None

  def __call__(self, x_BxTxC):
    k = self.kernel_size
    t = x_BxTxC.shape[1]
    x_pad = jnp.pad(x_BxTxC, ((0, 0), (k - 1, 0), (0, 0)))
    w = self.kernel[...].astype(x_BxTxC.dtype)
    # tap j multiplies x_{t-j}; kernel row k-1-j holds it (row k-1 is the current token)
    y = sum(x_pad[:, i:i + t] * w[i] for i in range(k))
    return y + self.bias[...].astype(y.dtype) if self.bias is not None else y

  def init_cache(self, batch: int, channels: int):
    return jnp.zeros((batch, self.kernel_size - 1, channels), jnp.float32)

  def step(self, x_Bx1xC, cache_BxKm1xC):
    window = jnp.concatenate([cache_BxKm1xC, x_Bx1xC.astype(jnp.float32)], axis=1)
    y = jnp.einsum("bkc,kc->bc", window, self.kernel[...])[:, None]
    if self.bias is not None:
      y = y + self.bias[...]
    return y.astype(x_Bx1xC.dtype), window[:, 1:]
