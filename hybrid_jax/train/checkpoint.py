"""Orbax checkpoints: log-spaced ones kept forever (emergence analysis needs early points),
plus a rolling latest one every ``checkpoint.every`` steps. Orbax writes each step into a
temporary directory and renames it when complete, so a crash never leaves a torn step.
A small unsharded state is saved packed (``hybrid_jax.run.packed_state``: orbax's cost is
per array); either form restores."""

import concurrent.futures
import contextlib
import functools
import logging
import os
import threading

import jax
import numpy as np

import orbax.checkpoint as ocp
from orbax.checkpoint.checkpoint_managers import preservation_policy as pp
from orbax.checkpoint.checkpoint_managers import save_decision_policy as sdp

from hybrid_jax.run import packed_state
from hybrid_jax.run.restore import quiet_orbax_noise
from hybrid_jax.train.config import CheckpointConfig


@contextlib.contextmanager
def quiet_orbax_logs():
  """Orbax logs unreadable step metadata and failed restores through absl (file contents,
  asyncio tracebacks); ``train.resume`` says what happened in one line instead."""
  logger = logging.getLogger("absl")
  level = logger.level
  logger.setLevel(logging.CRITICAL)
  try:
    yield
  finally:
    logger.setLevel(level)


def log_spaced_steps(total_steps: int, per_octave: int, min_step: int = 1) -> list[int]:
  """Steps 2^(i/per_octave) rounded, from min_step up to total_steps: dense early."""
  if per_octave <= 0:
    return []
  steps, i = set(), 0
  while (s := round(2 ** (i / per_octave))) <= total_steps:
    if s >= min_step:
      steps.add(s)
    i += 1
  return sorted(steps)


SAVE_NICE = 19      # the lowest: a save still gets a share of a busy core, unlike SCHED_IDLE


def lower_thread_priority():
  """The checkpoint thread (and the threads orbax starts from it, which inherit it) runs
  niced: on a host whose cores also run the step (a CPU run) the step comes first and the
  save takes longer, which the skipped rolling saves absorb."""
  try:
    tid = threading.get_native_id()
    os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + SAVE_NICE))
  except (OSError, AttributeError):      # not permitted, or no per-thread priority here
    pass


COPY_CHUNK_BYTES = 8 << 20      # host_copy's unit of work: a slice of one array


def host_copy(state):
  """The state as host arrays of its own: the next step donates the device buffers, and on
  the CPU ``np.asarray`` of a jax array is a view of them. The loop waits for this copy (no
  step runs meanwhile), so the slices are copied by one thread per core: memcpy releases
  the GIL, and one thread left the other core idle."""
  if packed_state.packable(state):
    return packed_state.pack(state)            # concatenates: a copy already
  leaves, tree = jax.tree.flatten(state)
  sources = [np.asarray(x) for x in leaves]    # waits for the step that made them
  copies = [np.empty_like(x) for x in sources]
  slices = []                                  # (source, copy) views of COPY_CHUNK_BYTES
  for src, dst in zip(sources, copies):
    src, dst = src.reshape(-1), dst.reshape(-1)
    n = max(1, COPY_CHUNK_BYTES // max(1, src.itemsize))
    slices += [(src[i:i + n], dst[i:i + n]) for i in range(0, src.size, n)]
  list(_copy_pool().map(lambda pair: np.copyto(pair[1], pair[0]), slices))
  return jax.tree.unflatten(tree, copies)


@functools.cache
def _copy_pool() -> concurrent.futures.ThreadPoolExecutor:
  return concurrent.futures.ThreadPoolExecutor(
      max_workers=max(1, min(8, len(os.sched_getaffinity(0)))), thread_name_prefix="host-copy")


class Checkpointer:
  """Saves are asynchronous by default (``checkpoint.async_save``). In one process ``save``
  copies the state to host arrays and returns; one thread of ours runs orbax's whole save
  (write, rename, deletion of the superseded step) while the loop trains on. A rolling save
  due while the one before is still being written is skipped (the next due step saves), so
  a save never makes the loop wait for another; the log-spaced kept steps, the last step and
  forced saves always save, after the one in flight. Across processes orbax's own async
  checkpointer runs the save (every process writes its shards; the loop waits for the
  device-to-host copy). Orbax writes into a temporary directory renamed when complete, so a
  process killed mid-write leaves no step that restore accepts."""

  def __init__(self, directory, ck, total_steps: int):
    """``ck``: the resolved ``checkpoint`` section, or its CheckpointConfig."""
    ck = CheckpointConfig.from_config(ck)
    self.directory = directory
    self.async_save = ck.async_save
    self.kept_steps = log_spaced_steps(total_steps, ck.log_per_octave, ck.log_min_step)
    self.kept_set, self.every, self.skipped = set(self.kept_steps), ck.every, 0
    # Our thread in one process; orbax's async checkpointer across processes (see above).
    self.thread = (concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="checkpoint",
                                                         initializer=lower_thread_priority)
                   if ck.async_save and jax.process_count() == 1 else None)
    self.in_flight = None                    # the thread's save being written (a Future)
    orbax_async = ck.async_save and self.thread is None
    options = ocp.CheckpointManagerOptions(
        save_decision_policy=sdp.AnySavePolicy([
            sdp.SpecificStepsPolicy(self.kept_steps), sdp.FixedIntervalPolicy(ck.every)]),
        preservation_policy=pp.AnyPreservationPolicy([
            pp.CustomSteps(self.kept_steps), pp.LatestN(1)]),
        # Partial saves are removed by ``train.resume`` before any restore, synchronously:
        # orbax's own cleanup runs in a thread and raced it over the same directories.
        enable_async_checkpointing=orbax_async, cleanup_tmp_directories=False, create=True,
        # The rolling checkpoint's predecessor is deleted in a thread, not inside ``save``;
        # a crash mid-delete leaves an older step the resume skips as corrupt if it is newest.
        enable_background_delete=orbax_async)
    quiet_orbax_noise()             # orbax's closed-event-loop and disk-error echoes, process-wide
    with quiet_orbax_logs():        # a corrupt step's metadata: resume reports it in one line
      self.manager = ocp.CheckpointManager(directory, options=options,
                                           item_handlers=ocp.StandardCheckpointHandler())

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def all_steps(self) -> list[int]:
    """Every step on disk, newest last: resume walks them back past a corrupt one."""
    return list(self.manager.all_steps())

  def should_save(self, step: int) -> bool:
    """Orbax's policy (kept steps, every ``checkpoint.every``); with our thread, the same rule
    read without touching the manager the thread is saving through."""
    if self.thread is None:
      return self.manager.should_save(step)
    return step in self.kept_set or step % self.every == 0

  def save(self, step: int, state, force: bool = False) -> bool:
    """Start saving ``step`` (synchronous saves also finish it); False when the policy skips
    the step, or (async, one process) when it is a rolling save due while another is being
    written."""
    if not (force or self.should_save(step)):
      return False                          # no host copy on the steps that are not saved
    if self.thread is None:
      item = packed_state.pack(state) if packed_state.packable(state) else state
      saved = self.manager.save(step, args=ocp.args.StandardSave(item), force=force)
      if not self.async_save:
        self.manager.wait_until_finished()
      return saved
    if self.in_flight is not None and not self.in_flight.done():
      if not (force or step in self.kept_set):
        self.skipped += 1
        return False
    self.wait()                             # the previous save's error, if any, raises here
    item = host_copy(state)
    self.in_flight = self.thread.submit(self._write, step, item, force)
    return True

  def _write(self, step: int, item, force: bool):
    """In the checkpoint thread: orbax's synchronous save, then the superseded step deleted."""
    self.manager.save(step, args=ocp.args.StandardSave(item), force=force)
    self.manager.wait_until_finished()

  def wait(self):
    """Until the save in flight (if any) is on disk; its error, if it failed, raises here."""
    if self.in_flight is not None:
      future, self.in_flight = self.in_flight, None
      future.result()
    self.manager.wait_until_finished()

  def reload(self):
    """Forget cached step lists (after a step directory was moved aside)."""
    self.manager.reload()

  def restore(self, step: int, abstract_state):
    """The state of ``step``, shaped and placed like ``abstract_state`` (ShapeDtypeStructs
    with shardings), from either checkpoint form."""
    if packed_state.is_packed(self.manager.item_metadata(step)):
      item = self.manager.restore(step, args=ocp.args.StandardRestore())
      return packed_state.unpack(item[packed_state.PACKED], item[packed_state.LAYOUT],
                                 abstract_state)
    return self.manager.restore(step, args=ocp.args.StandardRestore(abstract_state))

  def close(self):
    try:
      self.wait()
    finally:
      if self.thread is not None:
        self.thread.shutdown(wait=True)
      self.manager.close()
