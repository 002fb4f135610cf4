"""Decoder-only LM: embedding, pre-norm blocks (RMSNorm, mixer, SwiGLU), final norm, head."""

import jax
import jax.numpy as jnp
from flax import nnx

from hybrid_jax.configs.sizes import layer_letters
from hybrid_jax.model import registry


class SwiGLU(nnx.Module):
  def __init__(self, d_model: int, d_ff: int, dtype, rngs: nnx.Rngs):
    lin = lambda i, o: nnx.Linear(i, o, use_bias=False, dtype=dtype, rngs=rngs)
    self.gate, self.up, self.down = lin(d_model, d_ff), lin(d_model, d_ff), lin(d_ff, d_model)

  def __call__(self, x_BxTxD):
    # 2-D matmuls: XLA:CPU computes the weight gradients of [B*T, D] inputs ~2x faster.
    x_NxD = x_BxTxD.reshape(-1, x_BxTxD.shape[-1])
    y_NxD = self.down(jax.nn.silu(self.gate(x_NxD)) * self.up(x_NxD))
    return y_NxD.reshape(x_BxTxD.shape)


class Block(nnx.Module):
  def __init__(self, m, letter: str, rngs: nnx.Rngs):
    dtype = jnp.dtype(m.dtype)
    self.letter = letter
    self.mixer_norm = nnx.RMSNorm(m.d_model, epsilon=m.norm_eps, dtype=dtype, rngs=rngs)
    self.mixer = registry.get(letter).build(m, rngs)
    self.mlp_norm = nnx.RMSNorm(m.d_model, epsilon=m.norm_eps, dtype=dtype, rngs=rngs)
    self.mlp = SwiGLU(m.d_model, m.d_ff, dtype, rngs)

  def __call__(self, x_BxTxD):
    x_BxTxD = x_BxTxD + self.mixer(self.mixer_norm(x_BxTxD))
    return x_BxTxD + self.mlp(self.mlp_norm(x_BxTxD))


class LM(nnx.Module):
  """Hybrid LM whose layer i uses the mixer of letter pattern[i % len(pattern)]."""

  def __init__(self, m, rngs: nnx.Rngs):
    dtype = jnp.dtype(m.dtype)
    self.tie_embeddings = m.tie_embeddings
    self.layer_letters = layer_letters(m.pattern, m.n_layers)
    self.embed = nnx.Embed(m.vocab_size, m.d_model, dtype=dtype, rngs=rngs,
                           embedding_init=nnx.initializers.normal(m.d_model ** -0.5))
    self.blocks = nnx.List([Block(m, letter, rngs) for letter in self.layer_letters])
    self.final_norm = nnx.RMSNorm(m.d_model, epsilon=m.norm_eps, dtype=dtype, rngs=rngs)
    if not m.tie_embeddings:
      self.head = nnx.Linear(m.d_model, m.vocab_size, use_bias=False, dtype=dtype, rngs=rngs)

  def __call__(self, tokens_BxT):
    x_BxTxD = self.embed(tokens_BxT)
    for block in self.blocks:
      x_BxTxD = block(x_BxTxD)
    x_BxTxD = self.final_norm(x_BxTxD)
    logits_BxTxV = self.embed.attend(x_BxTxD) if self.tie_embeddings else self.head(x_BxTxD)
    return logits_BxTxV.astype(jnp.float32)


def build_model(model_cfg, seed: int) -> LM:
  return LM(model_cfg, nnx.Rngs(params=seed))
