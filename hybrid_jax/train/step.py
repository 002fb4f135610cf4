"""The jitted train step over a pure pytree state {params, opt_state}."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree
from jax.sharding import PartitionSpec as P

from hybrid_jax.flax_nnx import nnx
from hybrid_jax.train import sharding
from hybrid_jax.train.config import TrainConfig


def lm_loss(logits_BxTxV, targets_BxT, answer_mask_BxT):
  """Mean next-token loss (one-hot form: its backward is far cheaper than a gather's on CPU),
  plus the loss and accuracy on retrieval answers."""
  logp_BxTxV = jax.nn.log_softmax(logits_BxTxV, axis=-1)
  onehot = jax.nn.one_hot(targets_BxT, logits_BxTxV.shape[-1], dtype=logp_BxTxV.dtype)
  nll_BxT = -jnp.sum(logp_BxTxV * onehot, axis=-1)
  loss = jnp.mean(nll_BxT)
  n_answers = jnp.maximum(answer_mask_BxT.sum(), 1)
  answer_loss = jnp.sum(nll_BxT * answer_mask_BxT) / n_answers
  # A hit: the target's logit is the largest (argmax's variadic reduce cost 2.5% of the toy step).
  hit_BxT = -nll_BxT >= jnp.max(logp_BxTxV, axis=-1)
  answer_acc = jnp.sum(hit_BxT & answer_mask_BxT) / n_answers
  return loss, dict(loss=loss, answer_loss=answer_loss, answer_acc=answer_acc)


def accumulated_grad(loss_fn, params, batch, microbatches: int, constrain=lambda b: b):
  """``jax.grad(loss_fn, has_aux=True)`` over the batch run as ``microbatches`` equal parts
  (a scan: one part's activations live at a time). Microbatch ``i`` takes rows ``i, i+k, ...``
  so that every device keeps its share of each part; the mean loss, its gradient and the
  answer metrics (weighted by each part's answer count) equal the whole batch's up to rounding."""
  grad_fn = jax.grad(loss_fn, has_aux=True)
  if microbatches == 1:
    return grad_fn(params, batch)
  k = microbatches
  parts = jax.tree.map(lambda x: jnp.swapaxes(x.reshape(x.shape[0] // k, k, *x.shape[1:]), 0, 1),
                       batch)

  def body(acc, part):
    part = constrain(part)
    grads, metrics = grad_fn(params, part)
    n_answers = part["answer_mask"].sum().astype(jnp.float32)
    sums = dict(loss=metrics["loss"], answer_loss=metrics["answer_loss"] * n_answers,
                answer_acc=metrics["answer_acc"] * n_answers, n_answers=n_answers)
    return jax.tree.map(jnp.add, acc, (grads, sums)), None

  zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
  init = (zeros, dict(loss=0.0, answer_loss=0.0, answer_acc=0.0, n_answers=0.0))
  init = jax.tree.map(jnp.asarray, init)
  (grads, sums), _ = jax.lax.scan(body, init, parts)
  n_answers = jnp.maximum(sums["n_answers"], 1.0)
  grads = jax.tree.map(lambda g, p: (g / k).astype(p.dtype), grads, params)
  return grads, dict(loss=sums["loss"] / k, answer_loss=sums["answer_loss"] / n_answers,
                     answer_acc=sums["answer_acc"] / n_answers)


def flat_data_parallel(mesh, batch_size=None, microbatches: int = 1) -> bool:
  """Whether the step reduces gradients itself, in one all-reduce: a CPU mesh of several
  devices, pure data parallel (fsdp 1), each device's rows a whole number of microbatches.
  XLA:CPU runs one all-reduce per parameter (gloo between processes: ~4 ms each on a 2-core
  host, 164 ms for 40 tensors against 13 ms for the same bytes in one; issue 19's notes), so
  the step computes each device's gradient in a ``shard_map`` and sums one flat vector.
  The model inside sees a fully manual mesh: the CPU attention loops over its own rows
  (``pallas_kernels.dispatch.one_cpu_device``)."""
  if mesh is None or mesh.size == 1 or mesh.shape["fsdp"] != 1:
    return False
  if {d.platform for d in mesh.devices.flat} != {"cpu"}:
    return False
  return batch_size is None or batch_size % (mesh.size * microbatches) == 0


def _device_grad(loss_fn, mesh, microbatches):
  """``accumulated_grad`` per device over its rows, then one ``psum`` of the gradients and
  the metrics' sums, flattened into one vector: the mean gradient and the whole batch's
  metrics (the answer metrics weighted by each device's answer count, as for microbatches)."""
  n = mesh.size

  def local(params, batch):
    grads, metrics = accumulated_grad(loss_fn, params, batch, microbatches)
    n_answers = batch["answer_mask"].sum().astype(jnp.float32)
    sums = dict(loss=metrics["loss"], answer_loss=metrics["answer_loss"] * n_answers,
                answer_acc=metrics["answer_acc"] * n_answers, n_answers=n_answers)
    if "stop" in batch:                         # rides the same all-reduce (``stop_votes``)
      sums["stop"] = jnp.max(batch["stop"]).astype(jnp.float32)
    flat, unravel = ravel_pytree((grads, sums))
    grads, sums = unravel(jax.lax.psum(flat, tuple(mesh.axis_names)))
    grads = jax.tree.map(lambda g, p: (g / n).astype(p.dtype), grads, params)
    n_answers = jnp.maximum(sums["n_answers"], 1.0)
    metrics = dict(loss=sums["loss"] / n, answer_loss=sums["answer_loss"] / n_answers,
                   answer_acc=sums["answer_acc"] / n_answers)
    if "stop" in sums:
      metrics["stop"] = sums["stop"]
    return grads, metrics

  rows = P(tuple(mesh.axis_names))
  return lambda params, batch: jax.shard_map(
      local, mesh=mesh, in_specs=(P(), rows), out_specs=P(), check_vma=False)(params, batch)


def _mesh_in_context(mesh):
  """The kernels' contract (``pallas_kernels.dispatch``): trace under the run's mesh, so that
  ``auto`` picks the Pallas kernels of the mesh's platform (also a deviceless TPU topology or
  GPU target compiled from a CPU host) and calls them per device in a ``shard_map``.
  ``jax.set_mesh`` is refused inside ``jax.jit``; its abstract mesh, which is what dispatch
  reads, is not (jax 0.10 and 0.11)."""
  if mesh is None:
    return contextlib.nullcontext()
  return jax.sharding.use_abstract_mesh(mesh.abstract_mesh)


def stop_votes(rows: int, stopping: bool):
  """The ``stop`` batch entry of a multi-process run: this process's vote, one per row. The
  step returns ``metrics["stop"] > 0`` when any process voted, so every process learns of a
  SIGTERM seen by one without a collective of its own. The host all-gather it replaces ran
  after every step, through gloo, and held the host until that step had finished (no
  dispatch ahead); the loop reads a step's answer one step later instead."""
  return np.full((rows,), stopping, np.int32)


def make_train_step(graphdef, rest, tx, *, mesh=None, state_shardings=None, microbatches=1,
                    batch_size=None, donate: bool = True):
  """The jitted step; with a ``mesh``, the state keeps ``state_shardings`` (FSDP) and the
  batch arrives split over the batch axes (``sharding.batch_axes`` of a microbatch when
  ``batch_size`` is given); ``microbatches > 1`` accumulates gradients. ``donate``: the input
  state's buffers are reused for the output state (no second copy of parameters and moments;
  the caller must not read the state it passed in). The step traces with ``mesh`` in context
  (``_mesh_in_context``): callers need not enter ``jax.set_mesh`` themselves."""
  def loss_fn(params, batch):
    model = nnx.merge(graphdef, params, rest)
    logits = model(batch["inputs"])
    with jax.named_scope("loss"):
      return lm_loss(logits, batch["targets"], batch["answer_mask"])

  constrain = lambda b: b
  if mesh is not None:
    batch_sharding = sharding.batch_sharding(mesh, batch_size and batch_size // microbatches)
    constrain = lambda b: jax.lax.with_sharding_constraint(b, batch_sharding)

  if flat_data_parallel(mesh, batch_size, microbatches):
    grad_fn = _device_grad(loss_fn, mesh, microbatches)
  else:
    grad_fn = lambda params, batch: accumulated_grad(loss_fn, params, batch, microbatches,
                                                     constrain)

  def train_step(state, batch):
    with _mesh_in_context(mesh):
      grads, metrics = grad_fn(state["params"], batch)
      if "stop" in batch and "stop" not in metrics:      # see ``stop_votes``
        metrics["stop"] = jnp.max(batch["stop"]).astype(jnp.float32)
      with jax.named_scope("optimizer"):
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        metrics["grad_norm"] = optax.tree.norm(grads)
    return dict(params=params, opt_state=opt_state), metrics

  donate_argnums = (0,) if donate else ()
  if mesh is None:
    return jax.jit(train_step, donate_argnums=donate_argnums)
  return jax.jit(train_step, in_shardings=(state_shardings, batch_sharding),
                 out_shardings=(state_shardings, sharding.replicated(mesh)),
                 donate_argnums=donate_argnums)


def step_for(cfg, graphdef, rest, tx, *, mesh=None, state_shardings=None, donate: bool = True):
  """The resolved run's train step, as the loop, its precompile, ``plan`` and ``bench`` all
  build it: one place, so what ``plan`` compiles is what ``train`` runs."""
  t = TrainConfig.from_config(cfg.train)
  return make_train_step(graphdef, rest, tx, mesh=mesh, state_shardings=state_shardings,
                         microbatches=t.microbatches, batch_size=t.batch_size, donate=donate)
