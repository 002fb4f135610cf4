"""Batches made ahead of the device: grain worker processes over step indices.

A step's batch is a pure function of (seed, step, rows), so the input pipeline is grain's
map dataset over ``range(start, stop)`` with the source's ``batch`` as the map, prefetched
by ``data.workers`` processes, each ``data.prefetch`` batches ahead (``mp_prefetch`` keeps
the steps in order). The batches are the ones ``source.batch(step)`` gives in-process
(``workers = 0``), so losses are identical and a resumed run starts its range at its step.
Each process of a multi-host run asks for its own rows only.
"""

import os
import signal
import sys
import threading
import time

from hybrid_jax.errors import UserError

MAX_AUTO_WORKERS = 16


class DataWorkerError(UserError):
  """A data worker process died (killed, out of memory): one line, never a hang."""


def resolve_workers(workers: int, platform: str) -> int:
  """``data.workers``; -1: none on a CPU host (the step's own threads need the cores), else
  one per core but one, at most 16."""
  if workers >= 0:
    return workers
  if platform == "cpu":
    return 0
  return max(1, min(MAX_AUTO_WORKERS, (os.cpu_count() or 2) - 1))


class _StepBatch:
  """step -> this process's rows of that step's batch. Picklable: each worker builds its own
  source (memory maps, the tokenizer) on first use."""

  def __init__(self, cfg, rows: range):
    self.cfg, self.rows, self._source = cfg, rows, None

  def __getstate__(self):
    return dict(cfg=self.cfg, rows=self.rows, _source=None)

  def __call__(self, step):
    if self._source is None:
      from hybrid_jax.data import make_source
      self._source = make_source(self.cfg)
    return self._source.batch(int(step), rows=self.rows)


def _quiet_worker(index: int, count: int):
  """Workers leave SIGINT/SIGTERM to the trainer, which saves and stops them (a worker that
  died of the signal first would turn a clean preemption into a data error), and exit when
  the trainer is gone, however it died (SIGKILL leaves no one to stop them)."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_IGN)
  if "jax" in sys.modules:        # grain imports JAX: keep it off the trainer's TPU or GPU
    sys.modules["jax"].config.update("jax_platforms", "cpu")
  parent = os.getppid()

  def watch():
    while os.getppid() == parent:
      time.sleep(1.0)
    os._exit(0)

  threading.Thread(target=watch, daemon=True, name="parent-watch").start()


class Batches:
  """Iterator over (step, this process's rows) for steps [start, stop); ``wait_s`` is the
  time the caller spent blocked on input. Close it (or use it as a context manager) to stop
  the workers."""

  def __init__(self, cfg, start: int, stop: int, rows: range, workers: int, prefetch: int = 2):
    self.step, self.stop, self.workers, self.wait_s = start, stop, workers, 0.0
    self._fn = _StepBatch(cfg, rows)
    self._it = None
    if workers > 0 and stop > start:
      self._it = iter(_grain_dataset(self._fn, start, stop, workers, prefetch))

  def __iter__(self):
    return self

  def __next__(self) -> dict:
    if self.step >= self.stop:
      raise StopIteration
    t0 = time.perf_counter()
    if self._it is None:
      batch = self._fn(self.step)
    else:
      try:
        batch = next(self._it)
      except UserError:
        raise
      except Exception as e:
        if "terminated unexpectedly" in str(e) or "exit code" in str(e):
          raise DataWorkerError(f"data: a worker process died while making the batch of step "
                                f"{self.step} ({' '.join(str(e).split())[:160]}); rerun the same "
                                "command to resume, or set --config.data.workers=0") from None
        raise
    self.wait_s += time.perf_counter() - t0
    self.step += 1
    return batch

  def close(self):
    it, self._it = self._it, None
    if it is not None and hasattr(it, "close"):
      it.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


def _grain_dataset(fn: _StepBatch, start: int, stop: int, workers: int, prefetch: int):
  import grain   # lazy: the in-process path (tests, CPU hosts) needs neither grain nor its workers
  from absl import flags
  if not flags.FLAGS.is_parsed():    # grain reads its absl flags; a library caller parsed none
    flags.FLAGS.mark_as_parsed()
  ds = grain.MapDataset.range(start, stop).map(fn).to_iter_dataset()
  return ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers,
                                                     per_worker_buffer_size=prefetch),
                        worker_init_fn=_quiet_worker)
