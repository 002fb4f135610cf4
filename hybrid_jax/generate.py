"""Greedy generation through the decoding caches (``LM.init_cache`` / ``decode_step``):
what a sampler built on hybrid_jax does, and what exported models are checked against."""

import jax
import jax.numpy as jnp
import numpy as np

from hybrid_jax.flax_nnx import nnx


def greedy_generate(model, prompt_BxT, new_tokens: int) -> np.ndarray:
  """The prompt followed by ``new_tokens`` argmax tokens, [B, T + new_tokens] int32: the
  prompt is fed token by token, then each step feeds back its own argmax (one jitted scan)."""
  prompt_BxT = jnp.asarray(prompt_BxT, jnp.int32)
  b, t = prompt_BxT.shape
  total = t + new_tokens
  graphdef, state = nnx.split(model)

  @jax.jit
  def run(state, prompt_BxT):
    m = nnx.merge(graphdef, state)
    tokens_BxL = jnp.zeros((b, total), jnp.int32).at[:, :t].set(prompt_BxT)

    def body(carry, pos):
      tokens_BxL, cache = carry
      logits_BxV, cache = nnx.merge(graphdef, state).decode_step(tokens_BxL[:, pos], cache, pos)
      nxt = jnp.argmax(logits_BxV, axis=-1).astype(jnp.int32)
      keep = pos + 1 < t                      # inside the prompt: keep the given token
      tokens_BxL = tokens_BxL.at[:, pos + 1].set(jnp.where(keep, tokens_BxL[:, pos + 1], nxt))
      return (tokens_BxL, cache), None

    (tokens_BxL, _), _ = jax.lax.scan(body, (tokens_BxL, m.init_cache(b, total)),
                                      jnp.arange(total - 1))
    return tokens_BxL

  return np.asarray(run(state, prompt_BxT))
