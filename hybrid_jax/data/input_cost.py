"""What a run's input costs per step on a given host: measured here, scaled to that host.

One batch of the run's own source (its corpus ids, tokenizer, mix) is made in this process
for a few steps; the median is what one worker takes for the whole global batch on one core
of this machine. A host of a multi-host run makes only its own rows, and its grain workers
make different steps' batches at once, so its input time per step is

  seconds(batch) x rows_per_host / batch_size / workers

with ``workers`` the run's ``data.workers`` (-1: one per vCPU but one, at most 16, as the
trainer picks). It assumes one of the host's cores is as fast as one of this machine's; the
host vCPU counts are in ``HOST_VCPUS`` (``host_vcpus``; sources in docs/planning.md).
"""

import json
import statistics
import time

from hybrid_jax.data.pipeline import MAX_AUTO_WORKERS

# vCPUs of one host of each accelerator machine type (Cloud TPU VM and GPU VM shapes), by
# chips on the host (a v5e/v6e slice past 8 chips is made of 4-chip hosts).
HOST_VCPUS = {
    "v4": {4: 240},                  # ct4p-hightpu-4t
    "v5e": {8: 224, 4: 112, 1: 24},  # ct5lp-hightpu-8t / -4t / -1t
    "v5p": {4: 208},                 # ct5p-hightpu-4t
    "v6e": {8: 180, 4: 180, 1: 44},  # ct6e-standard-8t / -4t / -1t
    "h100": {8: 208},                # a3-highgpu-8g
    "h200": {8: 224},                # a3-ultragpu-8g
}


def host_vcpus(chip: str, chips_per_host: int) -> int:
  """vCPUs of a host holding ``chips_per_host`` chips (the nearest listed shape at or above)."""
  shapes = HOST_VCPUS[chip]
  return shapes[min((c for c in shapes if c >= chips_per_host), default=max(shapes))]


_cache: dict[str, float] = {}


def batch_seconds(cfg, steps: int = 3) -> float:
  """Median seconds to make one whole batch of ``cfg``'s source in this process (after one
  warm-up batch, which opens the corpus and tokenizes the pair units). Cached per data
  config and batch size: a sweep's runs usually share one."""
  key = json.dumps([cfg.data.to_dict(), cfg.train.batch_size], sort_keys=True, default=str)
  if key not in _cache:
    from hybrid_jax.data import make_source
    source = make_source(cfg)
    source.batch(0)
    times = []
    for s in range(1, steps + 1):
      t0 = time.perf_counter()
      source.batch(s)
      times.append(time.perf_counter() - t0)
    _cache[key] = statistics.median(times)
  return _cache[key]


def host_workers(workers: int, vcpus: int) -> int:
  """The workers a host runs for ``data.workers`` (-1: the trainer's choice on an
  accelerator host)."""
  return workers if workers > 0 else 1 if workers == 0 else max(1, min(MAX_AUTO_WORKERS, vcpus - 1))


def input_seconds(cfg, hosts: int, vcpus: int) -> dict:
  """dict(batch_s (this machine, one core, whole batch), workers, input_s (per step, per
  host: the figure to set beside the step time))."""
  batch_s = batch_seconds(cfg)
  workers = host_workers(cfg.data.workers, vcpus)
  return dict(batch_s=batch_s, workers=workers, input_s=batch_s / max(1, hosts) / workers)
