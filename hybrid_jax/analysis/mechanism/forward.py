"""The LM's forward pass re-walked block by block, with the hooks the analyses need.

``Plan`` says what to change (ablate heads, cap attention windows, reset recurrent state);
``forward`` returns, besides the logits at chosen rows, the attention probabilities of every
attention layer at a few query rows only (q at those rows, k at every position: memory
O(rows x T), never T x T) and the residual stream at those rows after every layer. With an
empty plan and T <= LONG_CONTEXT it computes exactly what ``LM.__call__`` does (the same
modules and kernel); longer contexts run full-causal heads query chunk by query chunk, so
32K tokens fit in a few GB on CPU. The model's own code is untouched.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from hybrid_jax.flax_nnx import nnx
from hybrid_jax.model import registry
from hybrid_jax.model.rope import apply_rope
from pallas_kernels.swa import api as swa_api


@dataclasses.dataclass(frozen=True)
class Plan:
  """Inference-time interventions; hashable, so one jitted program per plan."""
  ablate: tuple = ()              # ((layer, (head, ...)), ...): heads whose output is replaced
  ablate_mode: str = "zero"       # zero | mean (a causal running mean of the head's output)
  cap_full: int | None = None     # window cap on full heads (F layers, the full heads of H)
  cap_local: int | None = None    # window cap on windowed heads (S layers, local heads of H)
  reset_block: int | None = None  # recurrent mixers run on blocks of this many tokens
  cap_recurrent: int | None = None  # recurrent mixers see only the last this many tokens


def layer_kind(letter: str) -> str:
  return registry.get(letter).kind


def is_attention(block) -> bool:
  return layer_kind(block.letter) != "recurrent"


def head_windows(mixer, t: int, plan: Plan = Plan()) -> tuple[int, ...]:
  """Per query head: the window it attends with (t = full causal) under ``plan``."""
  out = []
  for h in range(mixer.n_heads):
    local = h < mixer.local_heads
    w = min(mixer.window, t) if local else t
    cap = plan.cap_local if local else plan.cap_full
    out.append(min(w, cap) if cap is not None else w)
  return tuple(out)


LONG_CONTEXT = 2048   # beyond this, full-causal heads run one query chunk at a time
QUERY_CHUNK = 256


def chunked_causal_attention(q_BxTxHxDh, k_BxTxKxDh, v_BxTxKxDh, window: int,
                             chunk: int | None = None):
  """Causal attention (query i sees i - window < j <= i) computed ``chunk`` queries at a
  time in a ``lax.map``: O(chunk x T) live memory where the kernel's unrolled blocks may
  all be live at once, and rematerialised in the backward pass (gradient influence)."""
  b, t, h, dh = q_BxTxHxDh.shape
  chunk = chunk or QUERY_CHUNK
  group = h // k_BxTxKxDh.shape[2]
  k = jnp.repeat(k_BxTxKxDh, group, axis=2).astype(jnp.float32)
  v = jnp.repeat(v_BxTxKxDh, group, axis=2).astype(jnp.float32)
  n = -(-t // chunk)
  q = jnp.pad(q_BxTxHxDh, ((0, 0), (0, n * chunk - t), (0, 0), (0, 0)))
  q_NxBxCxHxDh = q.reshape(b, n, chunk, h, dh).transpose(1, 0, 2, 3, 4)
  j_1xT = jnp.arange(t)[None]

  @jax.checkpoint
  def one_chunk(args):
    q_BxCxHxDh, start = args
    i_Cx1 = (start + jnp.arange(chunk))[:, None]
    s = jnp.einsum("bchd,bthd->bhct", q_BxCxHxDh.astype(jnp.float32), k) * dh ** -0.5
    s = jnp.where((j_1xT <= i_Cx1) & (j_1xT > i_Cx1 - window), s, -jnp.inf)
    return jnp.einsum("bhct,bthd->bchd", jax.nn.softmax(s, axis=-1), v)

  o_NxBxCxHxDh = jax.lax.map(one_chunk, (q_NxBxCxHxDh, jnp.arange(n) * chunk))
  o = o_NxBxCxHxDh.transpose(1, 0, 2, 3, 4).reshape(b, n * chunk, h, dh)[:, :t]
  return o.astype(q_BxTxHxDh.dtype)


def attention_heads(mixer, h_BxTxD, windows_H):
  """Per-head attention outputs o [B, T, H, Dh] (before o_proj), each head with its window.
  Runs of heads that share a window and whole kv groups go through one call: the model's
  kernel, or ``chunked_causal_attention`` for windows beyond LONG_CONTEXT."""
  q, k, v = mixer.qkv(h_BxTxD)
  group = mixer.n_heads // mixer.n_kv_heads

  def attend(q, k, v, w):
    if w > LONG_CONTEXT:
      return chunked_causal_attention(q, k, v, w)
    return swa_api.sliding_window_attention(q, k, v, window=w, implementation=mixer.impl)

  outs, start = [], 0
  while start < mixer.n_heads:
    end = start + 1
    while end < mixer.n_heads and windows_H[end] == windows_H[start]:
      end += 1
    if start % group == 0 and end % group == 0:
      outs.append(attend(q[:, :, start:end], k[:, :, start // group:end // group],
                         v[:, :, start // group:end // group], windows_H[start]))
    else:     # a run that splits a kv group: head by head
      for hd in range(start, end):
        g = hd // group
        outs.append(attend(q[:, :, hd:hd + 1], k[:, :, g:g + 1], v[:, :, g:g + 1], windows_H[hd]))
    start = end
  return jnp.concatenate(outs, axis=2)


def ablate_heads(o_BxTxHxDh, heads, mode: str):
  """Heads' outputs zeroed, or replaced at each position by their mean over the positions up
  to it (a causal running mean: a mean over the whole sequence would leak later tokens, the
  answers included, into earlier rows)."""
  idx = jnp.asarray(heads)
  if mode == "zero":
    fill = jnp.zeros_like(o_BxTxHxDh[:, :, idx])
  elif mode == "mean":
    o = o_BxTxHxDh[:, :, idx].astype(jnp.float32)
    count_T = jnp.arange(1, o.shape[1] + 1, dtype=jnp.float32)[None, :, None, None]
    fill = (jnp.cumsum(o, axis=1) / count_T).astype(o_BxTxHxDh.dtype)
  else:
    raise ValueError(f"ablate_mode must be zero or mean; got {mode!r}")
  return o_BxTxHxDh.at[:, :, idx].set(fill)


def attention_rows(mixer, h_BxTxD, rows_BxR, windows_H):
  """Attention probabilities p [B, H, R, T] of the query rows ``rows_BxR`` only: q is
  projected at those rows, k at every position (the scale and masks of the kernel)."""
  b, t, d = h_BxTxD.shape
  dh, group = mixer.head_dim, mixer.n_heads // mixer.n_kv_heads
  h_BxRxD = jnp.take_along_axis(h_BxTxD, rows_BxR[..., None], axis=1)
  q_BxRxHxDh = mixer.q_proj(h_BxRxD).reshape(b, -1, mixer.n_heads, dh)
  k_BxTxKxDh = mixer.k_proj(h_BxTxD).reshape(b, t, mixer.n_kv_heads, dh)
  if mixer.pos == "rope":
    q_BxRxHxDh = jax.vmap(lambda q, p: apply_rope(q[None], p, mixer.rope_theta)[0])(
        q_BxRxHxDh, rows_BxR)
    k_BxTxKxDh = apply_rope(k_BxTxKxDh, np.arange(t), mixer.rope_theta)
  k_BxTxHxDh = jnp.repeat(k_BxTxKxDh, group, axis=2)
  s_BxHxRxT = jnp.einsum("brhd,bthd->bhrt", q_BxRxHxDh.astype(jnp.float32),
                         k_BxTxHxDh.astype(jnp.float32)) * dh ** -0.5
  i_BxRx1 = rows_BxR[:, :, None]
  j_1x1xT = jnp.arange(t)[None, None, :]
  w_Hx1x1x1 = jnp.asarray(windows_H)[:, None, None, None]
  mask_HxBxRxT = (j_1x1xT <= i_BxRx1)[None] & (j_1x1xT > i_BxRx1 - w_Hx1x1x1)
  s_BxHxRxT = jnp.where(jnp.moveaxis(mask_HxBxRxT, 0, 1), s_BxHxRxT, -jnp.inf)
  return jax.nn.softmax(s_BxHxRxT, axis=-1)


def recurrent_blocks(mixer, h_BxTxD, block: int):
  """The mixer run on consecutive blocks of ``block`` tokens, each from a zero state (and a
  zero short-conv history): every output sees at most the last ``block`` tokens."""
  b, t, d = h_BxTxD.shape
  n = t // block
  parts = []
  if n:
    whole = h_BxTxD[:, :n * block].reshape(b * n, block, d)
    parts.append(mixer(whole).reshape(b, n * block, -1))
  if t > n * block:
    parts.append(mixer(h_BxTxD[:, n * block:]))
  return jnp.concatenate(parts, axis=1)


def recurrent_last_tokens(mixer, h_BxTxD, window: int):
  """Position i's output from the mixer run on tokens i - window < j <= i alone (a zero
  state and conv history at the window's start): "sees only the last W tokens", the same
  operator as an attention head's window cap, where a state reset every W tokens lets a
  block's first token see one token and its last see W. Positions i < window see all of
  their (at most W) tokens, so they keep the uncapped output. Cost O(T x W)."""
  b, t, d = h_BxTxD.shape
  if window >= t:
    return mixer(h_BxTxD)
  n = t - window + 1                                  # positions window-1 .. t-1
  idx_NxW = jnp.arange(n)[:, None] + jnp.arange(window)[None, :]
  windows_BxNxWxD = h_BxTxD[:, idx_NxW]
  last_BxNxD = mixer(windows_BxNxWxD.reshape(b * n, window, d))[:, -1].reshape(b, n, -1)
  head_BxWxD = mixer(h_BxTxD[:, :window - 1]) if window > 1 else last_BxNxD[:, :0]
  return jnp.concatenate([head_BxWxD, last_BxNxD], axis=1)


def mixer_output(block, layer: int, h_BxTxD, plan: Plan):
  """The block's mixer applied to its normed input, with the plan's interventions."""
  mixer, t = block.mixer, h_BxTxD.shape[1]
  ablated = dict(plan.ablate).get(layer, ())
  if not is_attention(block):
    if ablated:
      raise ValueError(f"layer {layer} is recurrent: it has no attention heads to ablate")
    if plan.cap_recurrent is not None:
      return recurrent_last_tokens(mixer, h_BxTxD, plan.cap_recurrent)
    if plan.reset_block is not None and plan.reset_block < t:
      return recurrent_blocks(mixer, h_BxTxD, plan.reset_block)
    return mixer(h_BxTxD)
  windows = head_windows(mixer, t, plan)
  if not ablated and windows == head_windows(mixer, t) and max(windows) <= LONG_CONTEXT:
    return mixer(h_BxTxD)          # the model's own path
  o = attention_heads(mixer, h_BxTxD, windows)
  if ablated:
    o = ablate_heads(o, ablated, plan.ablate_mode)
  b = o.shape[0]
  return mixer.o_proj(o.reshape(b * t, -1)).reshape(b, t, -1)


def blocks_forward(model, x_BxTxD, plan: Plan = Plan(), rows_BxR=None):
  """(final residual, probs {layer: [B, H, R, T]}, residual rows [B, L+1, R, D]) from the
  embeddings ``x``; probs and residual rows only when ``rows_BxR`` is given."""
  probs, resid = {}, []
  take = lambda x: jnp.take_along_axis(x, rows_BxR[..., None], axis=1)
  if rows_BxR is not None:
    resid.append(take(x_BxTxD))
  for layer, block in enumerate(model.blocks):
    h = block.mixer_norm(x_BxTxD)
    if rows_BxR is not None and is_attention(block):
      probs[layer] = attention_rows(block.mixer, h, rows_BxR,
                                    head_windows(block.mixer, h.shape[1], plan))
    x_BxTxD = x_BxTxD + mixer_output(block, layer, h, plan)
    x_BxTxD = x_BxTxD + block.mlp(block.mlp_norm(x_BxTxD))
    if rows_BxR is not None:
      resid.append(take(x_BxTxD))
  return x_BxTxD, probs, (jnp.stack(resid, axis=1) if resid else None)


def _chunking():
  """The globals a trace reads: part of every jit key, so changing them retraces."""
  return (LONG_CONTEXT, QUERY_CHUNK)


@functools.partial(jax.jit, static_argnames=("graphdef", "plan", "want", "chunking"))
def _forward(graphdef, state, tokens_BxT, rows_BxR, plan, want, chunking):
  model = nnx.merge(graphdef, state)
  x, probs, resid = blocks_forward(model, model.embed(tokens_BxT), plan, rows_BxR)
  x_rows = jnp.take_along_axis(x, rows_BxR[..., None], axis=1)
  out = dict(logits=model._logits(x_rows))          # [B, R, V]
  if "probs" in want:
    out["probs"] = probs
  if "resid" in want:
    out["resid"] = resid
  return out


def forward(model, tokens_BxT, rows_BxR, plan: Plan = Plan(), want=("probs",)):
  """dict(logits [B, R, V] at ``rows``, probs {layer: [B, H, R, T]}, resid [B, L+1, R, D])
  (the last two as asked in ``want``), under ``plan``; jitted per shape and plan."""
  graphdef, state = nnx.split(model)
  return _forward(graphdef, state, jnp.asarray(tokens_BxT, jnp.int32),
                  jnp.asarray(rows_BxR, jnp.int32), plan, tuple(sorted(want)), _chunking())


@functools.partial(jax.jit, static_argnames=("graphdef", "n_targets", "chunking"))
def _influence(graphdef, state, tokens_BxT, n_targets, chunking):
  model = nnx.merge(graphdef, state)

  def target_logits(x_BxTxD):
    x, _, _ = blocks_forward(model, x_BxTxD)
    t = x.shape[1]
    logits = model._logits(x[:, t - n_targets - 1:t - 1])      # rows whose next token is known
    return jnp.take_along_axis(logits, tokens_BxT[:, t - n_targets:, None], axis=-1).sum()

  g_BxTxD = jax.grad(target_logits)(model.embed(tokens_BxT))
  return jnp.sqrt(jnp.sum(jnp.square(g_BxTxD.astype(jnp.float32)), axis=-1))


def input_influence(model, tokens_BxT, n_targets: int):
  """|d (sum of the true next-token logits at rows T-1-n .. T-2) / d embedding_j| [B, T]."""
  graphdef, state = nnx.split(model)
  return _influence(graphdef, state, jnp.asarray(tokens_BxT, jnp.int32), n_targets, _chunking())
