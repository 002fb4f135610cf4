"""Softmax-attention mixers: F (full causal), S (sliding window), H (head-wise hybrid).

All three share one module; they differ only in which heads see a window. Every path goes
through ``pallas_kernels.swa.api`` (window >= T is full causal attention there).
"""

import jax.numpy as jnp
from flax import nnx

from hybrid_jax.model import registry
from hybrid_jax.model.rope import apply_rope
from pallas_kernels.swa import api as swa_api

FULL_WINDOW = None   # sentinel: attend to the whole causal prefix


def head_dim(m) -> int:
  return m.head_dim or m.d_model // m.n_heads


def n_local_heads(m) -> int:
  """H layers: number of (leading) query heads that use the window."""
  return round(m.local_head_fraction * m.n_heads)


def attention_param_count(m) -> int:
  dh = head_dim(m)
  return 2 * m.d_model * m.n_heads * dh + 2 * m.d_model * m.n_kv_heads * dh


class Attention(nnx.Module):
  """GQA attention; ``local_heads`` leading heads use ``window``, the rest are full."""

  def __init__(self, m, *, local_heads: int, pos: str, rngs: nnx.Rngs):
    dh = head_dim(m)
    dtype = jnp.dtype(m.dtype)
    lin = lambda i, o: nnx.Linear(i, o, use_bias=False, dtype=dtype, rngs=rngs)
    self.n_heads, self.n_kv_heads, self.head_dim = m.n_heads, m.n_kv_heads, dh
    self.window, self.local_heads = m.window, local_heads
    self.pos, self.rope_theta, self.impl = pos, m.rope_theta, m.attention_impl
    self.q_proj = lin(m.d_model, m.n_heads * dh)
    self.k_proj = lin(m.d_model, m.n_kv_heads * dh)
    self.v_proj = lin(m.d_model, m.n_kv_heads * dh)
    self.o_proj = lin(m.n_heads * dh, m.d_model)

  def qkv(self, x_BxTxD):
    """Projected (and, for RoPE layers, rotated) q [B,T,H,Dh], k and v [B,T,K,Dh]."""
    b, t, d = x_BxTxD.shape
    x_NxD = x_BxTxD.reshape(b * t, d)      # 2-D matmuls: faster weight gradients on CPU
    q = self.q_proj(x_NxD).reshape(b, t, self.n_heads, self.head_dim)
    k = self.k_proj(x_NxD).reshape(b, t, self.n_kv_heads, self.head_dim)
    v = self.v_proj(x_NxD).reshape(b, t, self.n_kv_heads, self.head_dim)
    if self.pos == "rope":
      pos_T = jnp.arange(t)
      q, k = apply_rope(q, pos_T, self.rope_theta), apply_rope(k, pos_T, self.rope_theta)
    return q, k, v

  def __call__(self, x_BxTxD):
    b, t, _ = x_BxTxD.shape
    q, k, v = self.qkv(x_BxTxD)
    attend = lambda q, k, v, w: swa_api.sliding_window_attention(
        q, k, v, window=w, implementation=self.impl)
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


@registry.register("F", "full attention", "full", attention_param_count)
def full_attention(m, rngs):
  return Attention(m, local_heads=0, pos=m.pos_full, rngs=rngs)


@registry.register("S", "sliding-window attention", "swa", attention_param_count)
def sliding_window_attention(m, rngs):
  return Attention(m, local_heads=m.n_heads, pos=m.pos_swa, rngs=rngs)


@registry.register("H", "head-wise SWA/full hybrid", "headwise", attention_param_count)
def headwise_attention(m, rngs):
  return Attention(m, local_heads=n_local_heads(m), pos=m.pos_headwise, rngs=rngs)
