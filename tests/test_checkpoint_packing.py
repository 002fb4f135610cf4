"""Packed checkpoints (``hybrid_jax.run.packed_state``): a small unsharded state is saved as a
few flat arrays and restores bitwise, for the trainer and for readers of the params alone;
per-array checkpoints still restore; another model's checkpoint is refused in one line; a
sharded or large state is saved array by array."""

import os
import subprocess
import sys
import textwrap
import threading

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from hybrid_jax.resolve import resolve
from hybrid_jax.run import RunDirError, packed_state
from hybrid_jax.run.restore import open_read_only, restore_params
from hybrid_jax.train.checkpoint import SAVE_NICE, Checkpointer
from hybrid_jax.train.state import abstract_model, init_state


def _state(tiny, **model):
  cfg = resolve(tiny(**model))
  return cfg, init_state(cfg)[2]


def _abstract(state):
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                      state)


def _assert_bitwise(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    assert x.dtype == y.dtype and x.shape == y.shape
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _saved_arrays(directory, step):
  reader = ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(
      read_only=True, create=False), item_handlers=ocp.PyTreeCheckpointHandler())
  tree = reader.item_metadata(step).tree
  reader.close()
  return tree, len(jax.tree.leaves(tree, is_leaf=lambda x: hasattr(x, "shape")))


def _saved_at_4(tiny, tmp_path):
  """(cfg, state, open Checkpointer) of a tiny model whose state is saved at step 4."""
  cfg, state = _state(tiny)
  ckpt = Checkpointer(tmp_path / "checkpoints", cfg.checkpoint, cfg.derived.steps)
  assert ckpt.save(4, state)
  ckpt.wait()                      # saves are async: on disk only once waited for
  return cfg, state, ckpt


def _read_params(workdir, step, cfg):
  """The params of checkpoint ``step`` as evaluation and loading read them."""
  _, abstract_params, _ = abstract_model(cfg.model, cfg.train.seed)
  reader = open_read_only(workdir)
  try:
    return restore_params(reader, workdir, step, abstract_params,
                          jax.sharding.SingleDeviceSharding(jax.local_devices()[0]))
  finally:
    reader.close()


def test_a_small_state_is_saved_as_few_arrays_and_restores_bitwise(tiny, tmp_path):
  _, state, ckpt = _saved_at_4(tiny, tmp_path)
  tree, n_arrays = _saved_arrays(tmp_path / "checkpoints", 4)
  assert packed_state.is_packed(tree)
  assert n_arrays <= 4 < len(jax.tree.leaves(state))   # params f32, moments f32 + i32, layout
  _assert_bitwise(ckpt.restore(4, _abstract(state)), state)
  ckpt.close()


def test_readers_restore_params_from_packed_and_per_array_checkpoints(tiny, tmp_path):
  cfg, state, ckpt = _saved_at_4(tiny, tmp_path)
  # A per-array checkpoint, as this project wrote before packing.
  ckpt.manager.save(8, args=ocp.args.StandardSave(state), force=True)
  ckpt.close()
  assert not packed_state.is_packed(_saved_arrays(tmp_path / "checkpoints", 8)[0])
  for step in (4, 8):
    params = _read_params(tmp_path, step, cfg)
    for x, y in zip(jax.tree.leaves(params), jax.tree.leaves(state["params"])):
      np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  trainer = Checkpointer(tmp_path / "checkpoints", cfg.checkpoint, cfg.derived.steps)
  _assert_bitwise(trainer.restore(8, _abstract(state)), state)
  trainer.close()


def test_a_packed_checkpoint_of_another_model_is_refused_in_one_line(tiny, tmp_path):
  _, _, ckpt = _saved_at_4(tiny, tmp_path)
  wider, other = _state(tiny, d_model=48)
  differs = r"kernel.* is \[48, 24\] float32 here but \[32, 16\] float32 in the checkpoint"
  with pytest.raises(ValueError, match=differs):
    ckpt.restore(4, _abstract(other))
  ckpt.close()
  with pytest.raises(RunDirError) as e:
    _read_params(tmp_path, 4, wider)
  assert "cannot restore checkpoint 4" in str(e.value) and "\n" not in str(e.value)


def test_a_large_state_is_not_packed(tiny, monkeypatch):
  _, state = _state(tiny)
  assert packed_state.packable(state)
  monkeypatch.setattr(packed_state, "PACK_MAX_BYTES", 1024)
  assert not packed_state.packable(state)


def test_a_sharded_state_is_not_packed_and_a_replicated_one_is():
  script = textwrap.dedent("""
      import jax, jax.numpy as jnp, numpy as np
      from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
      from hybrid_jax.run import packed_state
      mesh = Mesh(np.array(jax.devices()), ("fsdp",))
      x = jnp.arange(16.0).reshape(4, 4)
      split = {"params": {"w": jax.device_put(x, NamedSharding(mesh, P("fsdp")))}}
      whole = {"params": {"w": jax.device_put(x, NamedSharding(mesh, P()))}}
      abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype,
                                                             sharding=a.sharding), split)
      saved = packed_state.pack(whole)
      back = packed_state.unpack(saved["packed"], saved["layout"], abstract)   # onto shards
      assert back["params"]["w"].sharding == split["params"]["w"].sharding
      np.testing.assert_array_equal(np.asarray(back["params"]["w"]), np.asarray(x))
      print(packed_state.packable(split), packed_state.packable(whole))
      """)
  from hybrid_jax.bench.mesh import host_devices_env
  r = subprocess.run([sys.executable, "-c", script], env=host_devices_env(2),
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  assert r.stdout.split() == ["False", "True"]



def test_an_async_save_of_a_large_state_copies_it_before_the_next_step_takes_its_buffers(tiny, tmp_path, monkeypatch):
  """Above the packing size the state is copied array by array to host memory before
  ``save`` returns: the next step donates the device buffers, and the checkpoint written
  afterwards in the thread still holds the state as it was when saved."""
  monkeypatch.setattr(packed_state, "PACK_MAX_BYTES", 0)
  cfg, state = _state(tiny)
  expected = jax.tree.map(lambda x: np.array(x, copy=True), state)
  abstract = _abstract(state)
  ckpt = Checkpointer(tmp_path / "checkpoints", cfg.checkpoint, cfg.derived.steps)
  gate = threading.Event()
  write = ckpt._write
  monkeypatch.setattr(ckpt, "_write", lambda *a: (gate.wait(60), write(*a)))
  assert ckpt.thread is not None and ckpt.save(4, state, force=True)
  step = jax.jit(lambda s: jax.tree.map(lambda x: x * 0 + 7, s), donate_argnums=0)
  jax.block_until_ready(step(state))            # the state's buffers are the next step's now
  assert all(x.is_deleted() for x in jax.tree.leaves(state))
  gate.set()
  ckpt.wait()
  assert not packed_state.is_packed(_saved_arrays(tmp_path / "checkpoints", 4)[0])
  _assert_bitwise(ckpt.restore(4, abstract), expected)
  ckpt.close()


def test_a_rolling_save_due_while_one_is_written_is_skipped_but_kept_steps_are_not(tiny, tmp_path, monkeypatch):
  """The loop never waits for a save to start another rolling one: that save is skipped and
  counted. A kept (log-spaced) step waits for the one in flight and saves."""
  c = tiny(steps=1000)
  c.checkpoint.every = 1
  cfg = resolve(c)
  state = init_state(cfg)[2]
  ckpt = Checkpointer(tmp_path / "checkpoints", cfg.checkpoint, cfg.derived.steps)
  gate = threading.Event()
  write = ckpt._write
  monkeypatch.setattr(ckpt, "_write", lambda *a: (gate.wait(60), write(*a)))
  kept = next(s for s in ckpt.kept_steps if s > 100 and s - 2 not in ckpt.kept_steps
              and s - 1 not in ckpt.kept_steps)
  assert ckpt.save(kept - 2, state)                  # being written until the gate opens
  assert not ckpt.save(kept - 1, state) and ckpt.skipped == 1
  threading.Timer(0.5, gate.set).start()
  assert ckpt.save(kept, state)                      # kept: waits for the one in flight
  ckpt.wait()
  steps = ckpt.all_steps()
  assert kept in steps and kept - 1 not in steps, steps
  ckpt.close()


def test_the_checkpoint_thread_runs_below_the_trainers_priority(tiny, tmp_path):
  cfg, state = _state(tiny)
  ckpt = Checkpointer(tmp_path / "checkpoints", cfg.checkpoint, cfg.derived.steps)
  seen = ckpt.thread.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())).result()
  assert seen == min(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) + SAVE_NICE, 19)
  ckpt.close()


def test_the_host_copy_splits_arrays_into_slices_copied_by_threads_and_shares_no_memory(monkeypatch):
  """host_copy copies each array in slices on a thread pool (the loop waits for it): every
  slice boundary, odd size, dtype, scalar and empty array comes out equal and owned."""
  from hybrid_jax.train import checkpoint
  monkeypatch.setattr(packed_state, "PACK_MAX_BYTES", 0)
  monkeypatch.setattr(checkpoint, "COPY_CHUNK_BYTES", 40)       # 10 float32s a slice
  rng = np.random.default_rng(0)
  state = {"params": {"w": jnp.asarray(rng.normal(size=(7, 13)), jnp.float32),
                      "b": jnp.asarray(rng.normal(size=(33,)), jnp.bfloat16),
                      "s": jnp.asarray(3.5, jnp.float32), "e": jnp.zeros((0, 4), jnp.float32)},
           "opt": {"count": jnp.asarray(rng.integers(0, 99, size=(21,)), jnp.int32)}}
  copied = checkpoint.host_copy(state)
  assert jax.tree.structure(copied) == jax.tree.structure(state)
  for src, dst in zip(jax.tree.leaves(state), jax.tree.leaves(copied)):
    assert isinstance(dst, np.ndarray) and dst.dtype == src.dtype and dst.shape == src.shape
    assert np.array_equal(np.asarray(src), dst)
    assert not np.shares_memory(np.asarray(src), dst)
