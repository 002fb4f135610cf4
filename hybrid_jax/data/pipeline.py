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

import numpy as np

from hybrid_jax.errors import UserError

MAX_AUTO_WORKERS = 16
PACKED_TOKENS = "_tokens"


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

  def packed(self, step):
    """The batch as a worker sends it: a third of the bytes (``pack``)."""
    return pack(self(step), self.cfg.model.vocab_size)


def pack(batch: dict, vocab_size: int) -> dict:
  """What crosses from a worker: targets are inputs shifted by one, so one [B, T+1] token
  array carries both, as uint16 where the vocabulary fits (4.5 MB of a 32 x 16K batch
  become 1.5 MB; shared memory's copies cost a worker ~3 ms per MB). Any other batch passes
  as it is."""
  x, y = batch.get("inputs"), batch.get("targets")
  if x is None or y is None or x.shape != y.shape or not np.array_equal(x[:, 1:], y[:, :-1]):
    return batch
  tokens = np.concatenate([x, y[:, -1:]], axis=1)
  if vocab_size <= 1 << 16:
    tokens = tokens.astype(np.uint16)
  out = {k: v for k, v in batch.items() if k not in ("inputs", "targets")}
  out[PACKED_TOKENS] = tokens
  return out


def unpack(batch: dict) -> dict:
  """``pack``'s inverse: int32 inputs and targets (views of one array), the rest as sent."""
  if PACKED_TOKENS not in batch:
    return batch
  out = dict(batch)
  tokens = out.pop(PACKED_TOKENS).astype(np.int32)
  out["inputs"], out["targets"] = tokens[:, :-1], tokens[:, 1:]
  return out


WORKER_NICE = 10


def _quiet_worker(index: int, count: int):
  """Workers leave SIGINT/SIGTERM to the trainer, which saves and stops them (a worker that
  died of the signal first would turn a clean preemption into a data error), and exit when
  the trainer is gone, however it died (SIGKILL leaves no one to stop them). They run at a
  lower priority (``WORKER_NICE``): where workers and the trainer share cores (a CPU run, a
  small host) the trainer's step comes first and workers fill the time it leaves, which
  the prefetched batches absorb."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_IGN)
  try:
    os.nice(WORKER_NICE)
  except OSError:                  # not permitted here: same priority as the trainer
    pass
  if "jax" in sys.modules:        # grain imports JAX: keep it off the trainer's TPU or GPU
    sys.modules["jax"].config.update("jax_platforms", "cpu")
  import multiprocessing
  spawner = multiprocessing.parent_process()   # the trainer, even if it died while we started
  parent = spawner.pid if spawner is not None else os.getppid()

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
        batch = unpack(next(self._it))
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
  # One thread a worker, ``prefetch`` batches ahead (grain's default read options would run
  # 16 threads a worker, 500 elements ahead: gigabytes of batches and seconds-long stalls).
  ds = grain.MapDataset.range(start, stop).to_iter_dataset(
      grain.ReadOptions(num_threads=1, prefetch_buffer_size=prefetch)).map(fn.packed)
  ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers,
                                                   per_worker_buffer_size=prefetch),
                      worker_init_fn=_quiet_worker)
  # A thread of this process takes the workers' batches off shared memory ahead of the loop,
  # so the loop's next() is a queue pop, and a slow transfer now and then (grain's queues,
  # /dev/shm) is absorbed rather than a stall of the step.
  return grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=prefetch * workers)
