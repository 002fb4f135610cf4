"""Evaluation settings: the ``eval`` config section, its rules, and a settings id. Below
``resolve``, which composes these rules with every other section's, and below ``eval``,
which resolves the configs of the runs it reads (so they cannot live in ``eval/``).

Two evaluations are the same when every setting that can change a number is the same; the
id (a hash of those settings) tags each eval.jsonl record, so a rerun with the same settings
adds nothing and a changed setting evaluates again. ``eval.every`` only says *when* the
trainer evaluates, so it is not part of the id.
"""

import dataclasses
import hashlib
import json
import math

from hybrid_jax.configs import require_resolved
from hybrid_jax.core.eval_config import EvalConfig
from hybrid_jax.data import task_families

NOT_IN_ID = ("every",)


def task_module():
  """``hybrid_jax.data.task_families`` (every task by name); a function so that tests can
  substitute their own tasks."""
  return task_families


def task_names(spec: str) -> tuple[str, ...]:
  """``"all"`` -> every task, ``""`` -> none, else the comma-separated names in order."""
  spec = spec.strip()
  if spec == "":
    return ()
  if spec == "all":
    module = task_module()
    return tuple(getattr(module, "ALL_TASKS", module.TASK_NAMES))
  return tuple(n.strip() for n in spec.split(",") if n.strip())


def check_eval_section(e, fail) -> None:
  """Raise (through ``fail(field, rule, value)``) on the first broken rule of section eval."""
  is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)
  if e.every is not None and (not is_int(e.every) or e.every < 1):
    fail("eval.every", "must be None or an integer >= 1", e.every)
  if not isinstance(e.tasks, str):
    fail("eval.tasks", "must be a comma-separated string of task names, 'all' or ''", e.tasks)
  lengths = tuple(e.lengths) if isinstance(e.lengths, (tuple, list)) else (e.lengths,)
  if not lengths or not all(is_int(n) and n >= 2 for n in lengths):
    fail("eval.lengths", "must be a tuple of integers >= 2", e.lengths)
  depths = tuple(e.depths) if isinstance(e.depths, (tuple, list)) else (e.depths,)
  if not depths or not all(isinstance(d, (int, float)) and 0 <= d <= 1 for d in depths):
    fail("eval.depths", "must be a tuple of numbers in [0, 1]", e.depths)
  if len({f"{d:.2f}" for d in depths}) < len(depths):
    fail("eval.depths", "must differ in their first two decimals (they name the record's keys)", e.depths)
  for field in ("examples", "batch_tokens"):
    if not is_int(e[field]) or e[field] < 1:
      fail(f"eval.{field}", "must be an integer >= 1", e[field])
  for field in ("short_rows", "longppl_rows"):
    if not is_int(e[field]) or e[field] < 0:
      fail(f"eval.{field}", "must be an integer >= 0 (0 turns it off)", e[field])
  if e.short_length is not None and (not is_int(e.short_length) or e.short_length < 2):
    fail("eval.short_length", "must be None or an integer >= 2", e.short_length)
  w, n = e.longppl_window, e.longppl_length
  if not is_int(w) or w < 2 or w % 2:
    fail("eval.longppl_window", "must be an even integer >= 2", w)
  if not is_int(n) or n <= w or (n - w) % (w // 2):
    fail("eval.longppl_length", f"must exceed eval.longppl_window={w} by a multiple of "
         f"window/2={w // 2} (the truncated segments overlap by half)", n)
  if not isinstance(e.longppl_threshold, (int, float)) or not math.isfinite(e.longppl_threshold) \
      or e.longppl_threshold <= 0:
    fail("eval.longppl_threshold", "must be a finite number > 0 (nats)", e.longppl_threshold)
  if not is_int(e.seed) or e.seed < 0:
    fail("eval.seed", "must be an integer >= 0", e.seed)
  if e.reference is not None and (not isinstance(e.reference, str) or not e.reference):
    fail("eval.reference", "must be None or a run directory", e.reference)
  if e.reference_step is not None and (not is_int(e.reference_step) or e.reference_step < 1):
    fail("eval.reference_step", "must be None or a checkpoint step >= 1", e.reference_step)
  names = task_names(e.tasks)
  tasks = task_module()
  for name in names:
    if name not in tasks.TASK_NAMES:
      fail("eval.tasks", f"unknown task {name!r} (known: {', '.join(tasks.TASK_NAMES)})", e.tasks)
    shortest = tasks.min_length(name)
    if min(lengths) < shortest:
      fail("eval.lengths", f"{min(lengths)} is below the minimum length {shortest} of task {name!r}",
           e.lengths)


@dataclasses.dataclass(frozen=True)
class EvalSettings:
  """The resolved ``eval`` section, in the types the evaluators use."""
  tasks: tuple[str, ...]
  lengths: tuple[int, ...]
  depths: tuple[float, ...]
  examples: int
  seed: int
  batch_tokens: int
  short_length: int
  short_rows: int
  longppl_length: int
  longppl_rows: int
  longppl_window: int
  longppl_threshold: float
  reference: str | None
  reference_step: int | None

  @classmethod
  def from_config(cls, cfg) -> "EvalSettings":
    """From a resolved run config (``cfg.eval``, as its EvalConfig, plus ``data.seq_len`` for
    the short length)."""
    require_resolved(cfg, "EvalSettings.from_config")
    e = EvalConfig.from_config(cfg.eval)
    return cls(tasks=task_names(e.tasks), lengths=tuple(int(n) for n in e.lengths),
               depths=tuple(float(d) for d in e.depths), examples=int(e.examples),
               seed=int(e.seed), batch_tokens=int(e.batch_tokens),
               short_length=int(e.short_length or cfg.data.seq_len), short_rows=int(e.short_rows),
               longppl_length=int(e.longppl_length), longppl_rows=int(e.longppl_rows),
               longppl_window=int(e.longppl_window), longppl_threshold=float(e.longppl_threshold),
               reference=e.reference, reference_step=e.reference_step)

  def rows(self, length: int) -> int:
    """Rows per forward pass at ``length``: memory stays bounded at long contexts."""
    return max(1, self.batch_tokens // length)

  def to_dict(self) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

  def settings_id(self, reference_step: int | None = None) -> str:
    """Hash of every number-changing setting (the resolved reference step included)."""
    d = self.to_dict()
    d["reference_step"] = reference_step if reference_step is not None else self.reference_step
    d.update(task_families.versions(self.tasks))   # the examples themselves changed: evaluate again
    blob = json.dumps(d, sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]
