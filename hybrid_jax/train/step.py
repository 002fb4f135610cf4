"""The jitted train step over a pure pytree state {params, opt_state}."""

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from hybrid_jax.train import sharding


def lm_loss(logits_BxTxV, targets_BxT, answer_mask_BxT):
  """Mean next-token loss (one-hot form: its backward is far cheaper than a gather's on CPU),
  plus the loss and accuracy on retrieval answers."""
  logp_BxTxV = jax.nn.log_softmax(logits_BxTxV, axis=-1)
  onehot = jax.nn.one_hot(targets_BxT, logits_BxTxV.shape[-1], dtype=logp_BxTxV.dtype)
  nll_BxT = -jnp.sum(logp_BxTxV * onehot, axis=-1)
  loss = jnp.mean(nll_BxT)
  n_answers = jnp.maximum(answer_mask_BxT.sum(), 1)
  answer_loss = jnp.sum(nll_BxT * answer_mask_BxT) / n_answers
  hit_BxT = jnp.argmax(logits_BxTxV, axis=-1) == targets_BxT
  answer_acc = jnp.sum(hit_BxT & answer_mask_BxT) / n_answers
  return loss, dict(loss=loss, answer_loss=answer_loss, answer_acc=answer_acc)


def make_train_step(graphdef, rest, tx, *, mesh=None, state_shardings=None, donate: bool = True):
  """The jitted step; with a ``mesh``, the state keeps ``state_shardings`` (FSDP) and the
  batch arrives split over the batch axes. ``donate``: the input state's buffers are reused
  for the output state (no second copy of parameters and moments; the caller must not read
  the state it passed in)."""
  def loss_fn(params, batch):
    model = nnx.merge(graphdef, params, rest)
    logits = model(batch["inputs"])
    with jax.named_scope("loss"):
      return lm_loss(logits, batch["targets"], batch["answer_mask"])

  def train_step(state, batch):
    grads, metrics = jax.grad(loss_fn, has_aux=True)(state["params"], batch)
    with jax.named_scope("optimizer"):
      updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
      params = optax.apply_updates(state["params"], updates)
      metrics["grad_norm"] = optax.tree.norm(grads)
    return dict(params=params, opt_state=opt_state), metrics

  donate_argnums = (0,) if donate else ()
  if mesh is None:
    return jax.jit(train_step, donate_argnums=donate_argnums)
  return jax.jit(train_step, in_shardings=(state_shardings, sharding.batch_sharding(mesh)),
                 out_shardings=(state_shardings, sharding.replicated(mesh)),
                 donate_argnums=donate_argnums)
