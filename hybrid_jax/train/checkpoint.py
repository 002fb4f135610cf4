"""Orbax checkpoints: log-spaced ones kept forever (emergence analysis needs early points),
plus a rolling latest one every ``checkpoint.every`` steps. Orbax writes each step into a
temporary directory and renames it when complete, so a crash never leaves a torn step.
A small unsharded state is saved packed (``hybrid_jax.run.packed_state``: orbax's cost is
per array); either form restores."""

import contextlib
import logging

import orbax.checkpoint as ocp
from orbax.checkpoint.checkpoint_managers import preservation_policy as pp
from orbax.checkpoint.checkpoint_managers import save_decision_policy as sdp

from hybrid_jax.run import packed_state
from hybrid_jax.run.restore import quiet_orbax_noise


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


class Checkpointer:
  """Saves are asynchronous by default (``checkpoint.async_save``): ``save`` returns once the
  state is copied to host memory and orbax writes it in a thread; the next save, ``wait``
  and ``close`` wait for it. Orbax writes into a temporary directory renamed when complete,
  so a process killed mid-write leaves no step that restore accepts."""

  def __init__(self, directory, ck, total_steps: int):
    self.directory = directory
    self.async_save = ck.async_save
    self.kept_steps = log_spaced_steps(total_steps, ck.log_per_octave, ck.log_min_step)
    options = ocp.CheckpointManagerOptions(
        save_decision_policy=sdp.AnySavePolicy([
            sdp.SpecificStepsPolicy(self.kept_steps), sdp.FixedIntervalPolicy(ck.every)]),
        preservation_policy=pp.AnyPreservationPolicy([
            pp.CustomSteps(self.kept_steps), pp.LatestN(1)]),
        # Partial saves are removed by ``train.resume`` before any restore, synchronously:
        # orbax's own cleanup runs in a thread and raced it over the same directories.
        enable_async_checkpointing=self.async_save, cleanup_tmp_directories=False, create=True,
        # The rolling checkpoint's predecessor is deleted in a thread, not inside ``save``;
        # a crash mid-delete leaves an older step the resume skips as corrupt if it is newest.
        enable_background_delete=self.async_save)
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
    return self.manager.should_save(step)

  def save(self, step: int, state, force: bool = False) -> bool:
    """Start saving ``step`` (synchronous saves also finish it); False when the policy skips
    the step."""
    if not (force or self.manager.should_save(step)):
      return False                          # no host copy on the steps that are not saved
    item = packed_state.pack(state) if packed_state.packable(state) else state
    saved = self.manager.save(step, args=ocp.args.StandardSave(item), force=force)
    if not self.async_save:
      self.manager.wait_until_finished()
    return saved

  def wait(self):
    """Until the save in flight (if any) is on disk; its error, if it failed, raises here."""
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
      self.manager.wait_until_finished()
    finally:
      self.manager.close()
