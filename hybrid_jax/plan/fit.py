"""Plan one resolved run on a target: compile, check the HBM, and when it does not fit, find
the smallest change that keeps the configured global batch and makes it fit.

Changes are tried in order of their cost in throughput: more microbatches (no extra FLOPs,
smaller matmuls), then rematerialising whole blocks (``model.remat=full``: one more forward
pass) with as few microbatches as fit. The next microbatch count to try is predicted from the
temporaries measured so far (they scale with the rows of a microbatch) and checked by a compile.
"""

import copy
import dataclasses
import json
import math

from hybrid_jax.plan.compile import Compiled, compile_step
from hybrid_jax.plan.targets import Target

HEADROOM = 0.95          # share of a device's HBM a step may plan to use (runtime, fragmentation)


def one_line(e: BaseException) -> str:
  text = " ".join(str(e).split())
  for marker in ("NotImplementedError:", "RESOURCE_EXHAUSTED:"):
    if marker in text:
      text = text[text.index(marker):]
  text = text[:300] + ("..." if len(text) > 300 else "")
  return f"{type(e).__name__}: {text}" if text else type(e).__name__


def shape_key(cfg) -> str:
  """Runs that compile to the same program (the token budget only changes the step count and
  the schedule's constants) share one compile."""
  d = json.loads(cfg.to_json())
  for k in ("steps", "tokens", "tokens_per_param"):
    d["train"].pop(k, None)
  d.pop("derived", None)
  d.pop("eval", None)
  d.pop("checkpoint", None)
  return json.dumps(d, sort_keys=True)


class Compiler:
  """``compile_step`` with one compile per program shape (and per change tried)."""

  def __init__(self, target: Target, log=lambda m: None):
    self.target, self.log, self.cache = target, log, {}
    self.compiles = 0

  def __call__(self, cfg) -> tuple[Compiled | None, str | None, bool]:
    """(compiled or None, the compile error's line, whether it was reused)."""
    key = shape_key(cfg)
    if key in self.cache:
      return (*self.cache[key], True)
    self.log(f"compiling {cfg.model.size} {cfg.model.pattern} w={cfg.model.window} "
             f"B={cfg.train.batch_size} microbatches={cfg.train.microbatches} remat={cfg.model.remat}")
    try:
      out = (compile_step(cfg, self.target.devices), None)
    except Exception as e:
      out = (None, one_line(e))
    self.compiles += 1
    if out[0] is not None:
      out[0].executable = None        # keep the figures, free the program
    self.cache[key] = out
    return (*out, False)


def with_change(cfg, microbatches: int, remat: str):
  out = copy.deepcopy(cfg)
  out.train.microbatches, out.model.remat = microbatches, remat
  return out


def budget(target: Target) -> float:
  return HEADROOM * target.hbm_per_device


def fits(c: Compiled, target: Target) -> bool:
  return c.out_of_memory is None and c.hbm_bytes <= budget(target)


@dataclasses.dataclass
class Planned:
  cfg: object                    # the config compiled last (the configured one, or the change)
  compiled: Compiled | None
  error: str | None              # does not compile: the compiler's line
  fits: bool
  change: str | None             # the smallest change that fits, e.g. "train.microbatches=4"
  reused: bool
  note: str | None = None


def _allowed_microbatches(cfg, target: Target) -> list[int]:
  """Microbatch counts that keep every microbatch split over every device."""
  b, n = cfg.train.batch_size, len(target.devices)
  rows = b // n if b % n == 0 else 0
  return [m for m in range(1, b + 1) if b % m == 0 and (rows == 0 or rows % m == 0)
          and m >= cfg.train.microbatches]


def _predict(c: Compiled, m_now: int, allowed: list[int], target: Target) -> list[int]:
  """Allowed counts from the one whose predicted footprint fits onward (temporaries scale
  with 1 / microbatches; arguments, outputs and code do not)."""
  fixed = c.hbm_bytes - c.temp_bytes
  room = budget(target) - fixed
  if room <= 0:
    return []
  need = c.temp_bytes * m_now / room
  return [m for m in allowed if m >= need and m > m_now] or [m for m in allowed if m > m_now][-1:]


def plan_run(cfg, compiler: Compiler, search: bool = True) -> Planned:
  target = compiler.target
  compiled, error, reused = compiler(cfg)
  if compiled is None:
    return Planned(cfg, None, error, False, None, reused)
  if fits(compiled, target) or not search:
    return Planned(cfg, compiled, None, fits(compiled, target), None, reused)
  first = compiled
  allowed = _allowed_microbatches(cfg, target)
  remats = [cfg.model.remat] + (["full"] if cfg.model.remat != "full" else [])
  for remat in remats:
    m, c = cfg.train.microbatches, first
    if remat != cfg.model.remat:
      c, _, _ = compiler(with_change(cfg, m, remat))
      if c is not None and fits(c, target):
        return Planned(with_change(cfg, m, remat), c, None, True, f"model.remat={remat}", reused)
    while c is not None:
      nxt = _predict(c, m, allowed, target)
      if not nxt:
        break
      m = nxt[0]
      trial = with_change(cfg, m, remat)
      c, _, _ = compiler(trial)
      if c is not None and fits(c, target):
        change = f"train.microbatches={m}" + (f" model.remat={remat}" if remat != cfg.model.remat else "")
        return Planned(trial, c, None, True, change, reused)
  fixed_gib = (first.hbm_bytes - first.temp_bytes) / 2 ** 30
  note = (f"no microbatch count (up to {allowed[-1] if allowed else cfg.train.microbatches}) or "
          f"remat policy fits {budget(target) / 2 ** 30:.1f} GiB per device "
          f"(parameters, optimizer state and outputs alone: {fixed_gib:.1f} GiB); "
          f"use more chips (mesh.fsdp) or a shorter data.seq_len")
  return Planned(cfg, first, None, False, None, reused, note)
