"""The loop over (example, kv head) rows under one custom VJP: a row function pair
(``banded``, ``strips`` or ``folded``) over the batch, some rows per loop step (how many:
``policy.rows_per_step``)."""

import jax
import jax.numpy as jnp


def by_rows(forward, backward, rows, q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, keep=False):
  """``forward`` / ``backward`` (a row function pair) over the batch, ``rows`` (example,
  kv head) rows per loop step (all of them: no loop), under one custom VJP: the backward is
  one loop over the rows too, and keeps only q, k, v, the output and the row log-sum-exp
  (and with ``keep`` the probabilities).
  Differentiating through the loop instead (``jax.lax.map``, the path before this one) stacked
  every row's residuals (the key strips, 3x the keys at d256) and zero-filled and transposed
  them (measured against that path in one process, figures in issue 19's notes: the d256 op
  1.4-1.5x faster, the whole d256 step 1.4-1.7%).

  The whole batch is regrouped kv-head-major ([B * K, T, ...]) for one call of the row
  functions; a loop step's few kv heads are called one by one on static slices instead
  (regrouping inside the loop made toy full attention 1.4x slower).

  ``keep``: the forward keeps its probabilities for the backward (``attend_backward_kept``;
  a loop stacks its steps' in one buffer) instead of the backward recomputing them."""
  b, t, h, d = q_BxTxHxD.shape
  n_kv = k_BxTxKxD.shape[2]
  g = h // n_kv
  heads = n_kv if rows >= n_kv else max(x for x in range(1, rows + 1) if n_kv % x == 0)
  examples = max(x for x in range(1, max(rows // n_kv, 1) + 1) if b % x == 0)
  n_steps = (b // examples) * (n_kv // heads)

  def corner(step, per_head):    # first example and head index of a loop step's slice
    return ((step // (n_kv // heads)) * examples, (step % (n_kv // heads)) * heads * per_head)

  def take(x, step, per_head):
    """Loop step ``step``'s rows of a [B, T, kv heads * per_head, ...] tensor: a list of
    [E, T, per_head, ...], one entry per call of the row functions."""
    if n_steps == 1:                                         # regroup: one call
      x = x.reshape((b, t, n_kv, per_head) + x.shape[3:])
      return [jnp.moveaxis(x, 2, 1).reshape((b * n_kv, t, per_head) + x.shape[4:])]
    e0, h0 = corner(step, per_head)
    x = jax.lax.dynamic_slice(x, (e0, 0, h0) + (0,) * (x.ndim - 3),
                              (examples, t, heads * per_head) + x.shape[3:])
    return [x[:, :, j * per_head:(j + 1) * per_head] for j in range(heads)]

  def put(buf, xs, step, per_head):
    """Inverse of ``take``: the calls' outputs back into ``buf``
    [B, T, kv heads * per_head, ...]."""
    if n_steps == 1:
      x = xs[0].reshape((b, n_kv, t, per_head) + xs[0].shape[3:])
      return jnp.moveaxis(x, 1, 2).reshape(buf.shape).astype(buf.dtype)
    e0, h0 = corner(step, per_head)
    x = jnp.concatenate(xs, axis=2).astype(buf.dtype)
    return jax.lax.dynamic_update_slice(buf, x, (e0, 0, h0) + (0,) * (x.ndim - 3))

  take_kv = lambda x, step: [y[:, :, 0] for y in take(x, step, 1)]       # [E, T, D] each
  put_kv = lambda buf, xs, step: put(buf, [x[:, :, None] for x in xs], step, 1)

  def loop(body, init):
    return body(0, init) if n_steps == 1 else jax.lax.fori_loop(0, n_steps, body, init)

  def forward_loop(q, k, v, keep=False):
    """(o, lse), and with ``keep`` the calls' kept probabilities: a list, one entry per call
    of a loop step, each leaf stacked over the loop steps (a leading axis of 1 without one)."""
    def calls(step, q, k, v):
      return [forward(*row, **({"keep": True} if keep else {}))
              for row in zip(take(q, step, g), take_kv(k, step), take_kv(v, step))]
    def body(step, carry):
      outs = calls(step, q, k, v)
      o_lse = (put(carry[0], [out[0] for out in outs], step, g),
               put(carry[1], [out[1] for out in outs], step, g))
      if not keep:
        return o_lse
      kept = [out[2] for out in outs]
      return o_lse + ((jax.tree.map(lambda x: x[None], kept) if n_steps == 1 else
                       jax.tree.map(lambda buf, x: buf.at[step].set(x), carry[2], kept)),)
    init = (jnp.zeros_like(q), jnp.zeros((b, t, h), jnp.float32))
    if keep and n_steps > 1:
      one = jax.eval_shape(lambda *a: [out[2] for out in calls(0, *a)], q, k, v)
      init += (jax.tree.map(lambda x: jnp.zeros((n_steps,) + x.shape, x.dtype), one),)
    return loop(body, init)

  @jax.custom_vjp
  def attend(q, k, v):
    return forward_loop(q, k, v)[0]

  def attend_fwd(q, k, v):
    o, lse, *kept = forward_loop(q, k, v, keep)
    return o, (q, k, v, o, lse, kept)

  def attend_bwd(res, do):
    q, k, v, o, lse, kept = res
    def body(step, carry):
      rows = list(zip(take(q, step, g), take_kv(k, step), take_kv(v, step), take(o, step, g),
                      take(lse, step, g), take(do, step, g)))
      kws = ([{"kept": jax.tree.map(lambda buf: buf[step], x)} for x in kept[0]] if kept
             else [{}] * len(rows))
      grads = [backward(*row, **kw) for row, kw in zip(rows, kws)]
      return (put(carry[0], [dq for dq, _, _ in grads], step, g),
              put_kv(carry[1], [dk for _, dk, _ in grads], step),
              put_kv(carry[2], [dv for _, _, dv in grads], step))
    return loop(body, (jnp.zeros_like(q), jnp.zeros_like(k), jnp.zeros_like(v)))

  attend.defvjp(attend_fwd, attend_bwd)
  return attend(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD)
