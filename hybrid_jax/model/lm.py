"""Decoder-only LM: embedding, pre-norm blocks (RMSNorm, mixer, SwiGLU), final norm, head."""

import jax
import jax.numpy as jnp

from hybrid_jax.flax_nnx import nnx
from hybrid_jax.model import registry
from hybrid_jax.model.config import ModelConfig
from hybrid_jax.model.linear import linear
from hybrid_jax.model.params import layer_letters

# model.remat: what a block keeps for its backward pass (the rest is recomputed). "save_dots"
# keeps the weight matmuls' outputs and recomputes attention scores, scans and elementwise ops.
REMAT_POLICIES = {"none": None, "full": jax.checkpoint_policies.nothing_saveable,
                  "save_dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable}


class SwiGLU(nnx.Module):
  def __init__(self, d_model: int, d_ff: int, dtype, rngs: nnx.Rngs):
    lin = lambda i, o: linear(i, o, dtype=dtype, rngs=rngs)
    self.gate, self.up, self.down = lin(d_model, d_ff), lin(d_model, d_ff), lin(d_ff, d_model)

  def __call__(self, x_BxTxD):
    # 2-D matmuls: XLA:CPU computes the weight gradients of [B*T, D] inputs ~2x faster.
    with jax.named_scope("mlp"):   # named scopes label the ops in profiles (hybrid-jax bench train)
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
    with jax.named_scope("norm"):
      h_BxTxD = self.mixer_norm(x_BxTxD)
    x_BxTxD = x_BxTxD + self.mixer(h_BxTxD)
    with jax.named_scope("norm"):
      h_BxTxD = self.mlp_norm(x_BxTxD)
    return x_BxTxD + self.mlp(h_BxTxD)

  def step(self, x_Bx1xD, cache, pos):
    y, cache = self.mixer.step(self.mixer_norm(x_Bx1xD), cache, pos)
    x_Bx1xD = x_Bx1xD + y
    return x_Bx1xD + self.mlp(self.mlp_norm(x_Bx1xD)), cache


class LM(nnx.Module):
  """Hybrid LM whose layer i uses the mixer of letter pattern[i % len(pattern)]. ``m``: a
  resolved model section; blocks and mixers get its frozen ``ModelConfig``."""

  def __init__(self, m, rngs: nnx.Rngs):
    m = ModelConfig.from_config(m)
    dtype = jnp.dtype(m.dtype)
    self.tie_embeddings = m.tie_embeddings
    self.layer_letters = layer_letters(m.pattern, m.n_layers)
    self.remat = m.remat
    self.embed = nnx.Embed(m.vocab_size, m.d_model, dtype=dtype, rngs=rngs,
                           embedding_init=nnx.initializers.normal(m.d_model ** -0.5))
    self.blocks = nnx.List([Block(m, letter, rngs) for letter in self.layer_letters])
    self.final_norm = nnx.RMSNorm(m.d_model, epsilon=m.norm_eps, dtype=dtype, rngs=rngs)
    if not m.tie_embeddings:
      self.head = linear(m.d_model, m.vocab_size, dtype=dtype, rngs=rngs)

  def _logits(self, x_BxTxD):
    with jax.named_scope("head"):
      x_BxTxD = self.final_norm(x_BxTxD)
      logits_BxTxV = self.embed.attend(x_BxTxD) if self.tie_embeddings else self.head(x_BxTxD)
      return logits_BxTxV.astype(jnp.float32)

  def __call__(self, tokens_BxT):
    with jax.named_scope("embed"):
      x_BxTxD = self.embed(tokens_BxT)
    call = Block.__call__ if self.remat == "none" else nnx.remat(
        Block.__call__, policy=REMAT_POLICIES[self.remat])
    for block in self.blocks:
      x_BxTxD = call(block, x_BxTxD)
    return self._logits(x_BxTxD)

  # --- decoding: token by token, carrying per-layer caches ---------------------------

  def init_cache(self, batch: int, max_len: int) -> list:
    """Per-layer caches: KV (growing for full heads, a w-slot ring for SWA layers) or
    recurrent state (constant size)."""
    return [block.mixer.init_cache(batch, max_len) for block in self.blocks]

  def decode_step(self, tokens_B, cache: list, pos):
    """Logits [B, V] for the token at position ``pos`` and the updated caches."""
    x_Bx1xD = self.embed(tokens_B[:, None])
    new_cache = []
    for block, c in zip(self.blocks, cache):
      x_Bx1xD, c = block.step(x_Bx1xD, c, pos)
      new_cache.append(c)
    return self._logits(x_Bx1xD)[:, 0], new_cache


def build_model(model_cfg, seed: int) -> LM:
  return LM(model_cfg, nnx.Rngs(params=seed))


def decode(model: LM, tokens_BxT, max_len: int | None = None):
  """Logits [B, T, V] computed token by token through the caches (a jitted scan): the
  inference path long-context evaluation and generation use."""
  b, t = tokens_BxT.shape
  graphdef, state = nnx.split(model)

  @jax.jit
  def run(state, tokens_BxT):
    m = nnx.merge(graphdef, state)
    cache = m.init_cache(b, max_len or t)

    def body(cache, inputs):
      token_B, pos = inputs
      logits_BxV, cache = nnx.merge(graphdef, state).decode_step(token_B, cache, pos)
      return cache, logits_BxV

    _, logits_TxBxV = jax.lax.scan(body, cache, (tokens_BxT.T, jnp.arange(t)))
    return jnp.moveaxis(logits_TxBxV, 0, 1)

  return run(state, tokens_BxT)
