"""Softmax-attention mixers: F (full causal), S (sliding window), H (head-wise hybrid).

All three share one module; they differ only in which heads see a window. Every path goes
through ``pallas_kernels.swa.api`` (window >= T is full causal attention there).
"""

import jax
import jax.numpy as jnp
import numpy as np

from hybrid_jax.flax_nnx import nnx
from hybrid_jax.model import registry
from hybrid_jax.model.linear import linear
from hybrid_jax.model.rope import apply_rope
from pallas_kernels.swa import api as swa_api



def head_dim(m) -> int:
  return m.head_dim or m.d_model // m.n_heads


def n_local_heads(m) -> int:
  """H layers: number of (leading) query heads that use the window."""
  return round(m.local_head_fraction * m.n_heads)


def attention_param_count(m) -> int:
  dh = head_dim(m)
  return 2 * m.d_model * m.n_heads * dh + 2 * m.d_model * m.n_kv_heads * dh


def kv_floats(m) -> int:
  return 2 * m.n_kv_heads * head_dim(m)


def full_state_size(m, context: int) -> int:
  return kv_floats(m) * context                       # a growing KV cache


def swa_state_size(m, context: int) -> int:
  return kv_floats(m) * min(m.window, context)        # a ring buffer of w slots


class Attention(nnx.Module):
  """GQA attention; ``local_heads`` leading heads use ``window``, the rest are full."""

  def __init__(self, m, *, local_heads: int, pos: str, rngs: nnx.Rngs):
    dh = head_dim(m)
    dtype = jnp.dtype(m.dtype)
    lin = lambda i, o: linear(i, o, dtype=dtype, rngs=rngs)
    self.n_heads, self.n_kv_heads, self.head_dim = m.n_heads, m.n_kv_heads, dh
    self.window, self.local_heads = m.window, local_heads
    self.pos, self.rope_theta, self.impl = pos, m.rope_theta, m.attention_impl
    self.blocks = swa_api.BlockSizes(*m.swa_block_sizes) if m.swa_block_sizes else None
    self.q_proj = lin(m.d_model, m.n_heads * dh)
    self.k_proj = lin(m.d_model, m.n_kv_heads * dh)
    self.v_proj = lin(m.d_model, m.n_kv_heads * dh)
    self.o_proj = lin(m.n_heads * dh, m.d_model)

  def qkv(self, x_BxTxD, offset=0):
    """Projected (and, for RoPE layers, rotated) q [B,T,H,Dh], k and v [B,T,K,Dh];
    ``offset`` is the position of the first token (decoding)."""
    b, t, d = x_BxTxD.shape
    x_NxD = x_BxTxD.reshape(b * t, d)      # 2-D matmuls: faster weight gradients on CPU
    q = self.q_proj(x_NxD).reshape(b, t, self.n_heads, self.head_dim)
    k = self.k_proj(x_NxD).reshape(b, t, self.n_kv_heads, self.head_dim)
    v = self.v_proj(x_NxD).reshape(b, t, self.n_kv_heads, self.head_dim)
    if self.pos == "rope":
      # A Python offset (training, prefill) gives static positions: constant RoPE tables.
      pos_T = np.arange(offset, offset + t) if isinstance(offset, int) else offset + jnp.arange(t)
      q, k = apply_rope(q, pos_T, self.rope_theta), apply_rope(k, pos_T, self.rope_theta)
    return q, k, v

  def __call__(self, x_BxTxD):
    kind = "full" if self.local_heads == 0 else "swa" if self.local_heads == self.n_heads else "headwise"
    with jax.named_scope(f"attention_{kind}"):   # labels the ops in profiles
      return self._attention(x_BxTxD)

  def _attention(self, x_BxTxD):
    b, t, _ = x_BxTxD.shape
    q, k, v = self.qkv(x_BxTxD)
    attend = lambda q, k, v, w: swa_api.sliding_window_attention(
        q, k, v, window=w, implementation=self.impl, block_size=self.blocks)
    nl = self.local_heads
    if nl == 0:
      o = attend(q, k, v, t)
    elif nl == self.n_heads:
      o = attend(q, k, v, self.window)
    else:  # head-wise hybrid: leading heads (and their kv groups) windowed, the rest full
      nl_kv = nl * self.n_kv_heads // self.n_heads
      o = jnp.concatenate([attend(q[:, :, :nl], k[:, :, :nl_kv], v[:, :, :nl_kv], self.window),
                           attend(q[:, :, nl:], k[:, :, nl_kv:], v[:, :, nl_kv:], t)], axis=2)
    return self.o_proj(o.reshape(b * t, self.n_heads * self.head_dim)).reshape(b, t, -1)


  # --- decoding: one token at a time against a KV cache --------------------------------

  def init_cache(self, batch: int, max_len: int):
    """Full heads need every position (a growing cache, preallocated to max_len); a pure
    SWA layer keeps a ring buffer of w slots, so its memory does not grow with context."""
    size = min(self.window, max_len) if self.local_heads == self.n_heads else max_len
    shape = (batch, size, self.n_kv_heads, self.head_dim)
    return dict(k=jnp.zeros(shape, jnp.float32), v=jnp.zeros(shape, jnp.float32),
                pos=jnp.full((size,), -1, jnp.int32))

  def step(self, x_Bx1xD, cache, pos):
    b = x_Bx1xD.shape[0]
    q, k, v = self.qkv(x_Bx1xD, offset=pos)
    size = cache["pos"].shape[0]
    slot = pos % size
    cache = dict(k=cache["k"].at[:, slot].set(k[:, 0].astype(jnp.float32)),
                 v=cache["v"].at[:, slot].set(v[:, 0].astype(jnp.float32)),
                 pos=cache["pos"].at[slot].set(pos))
    group = self.n_heads // self.n_kv_heads
    window_H = jnp.where(jnp.arange(self.n_heads) < self.local_heads, self.window, pos + 1)
    valid_HxS = ((cache["pos"][None, :] >= 0) & (cache["pos"][None, :] <= pos)
                 & (cache["pos"][None, :] > pos - window_H[:, None]))
    q_BxKxGxD = q[:, 0].reshape(b, self.n_kv_heads, group, self.head_dim).astype(jnp.float32)
    s = jnp.einsum("bkgd,bskd->bkgs", q_BxKxGxD, cache["k"]) * self.head_dim ** -0.5
    s = jnp.where(valid_HxS.reshape(self.n_kv_heads, group, size)[None], s, -jnp.inf)
    o = jnp.einsum("bkgs,bskd->bkgd", jax.nn.softmax(s, axis=-1), cache["v"])
    o = o.reshape(b, self.n_heads * self.head_dim).astype(x_Bx1xD.dtype)
    return self.o_proj(o)[:, None], cache


@registry.register("F", "full attention", "full", attention_param_count, full_state_size)
def full_attention(m, rngs):
  return Attention(m, local_heads=0, pos=m.pos_full, rngs=rngs)


@registry.register("S", "sliding-window attention", "swa", attention_param_count, swa_state_size)
def sliding_window_attention(m, rngs):
  return Attention(m, local_heads=m.n_heads, pos=m.pos_swa, rngs=rngs)


@registry.register("H", "head-wise SWA/full hybrid", "headwise", attention_param_count,
                   full_state_size)   # its cache is full-length for all heads (the full ones need it)
def headwise_attention(m, rngs):
  return Attention(m, local_heads=n_local_heads(m), pos=m.pos_headwise, rngs=rngs)
