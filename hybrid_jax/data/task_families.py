"""Every evaluation task by name, behind the contract of ``hybrid_jax.data.tasks``: the
text tasks (RULER-style, MQAR) and the synthetic source's (``synthetic_tasks``). Evaluation
and the mechanism analyses look tasks up here, so a run on either source is measured on
tasks written in its own tokens."""

from hybrid_jax.data import synthetic_tasks, tasks

FAMILIES = (tasks, synthetic_tasks)
TASK_NAMES = tuple(n for f in FAMILIES for n in f.TASK_NAMES)
ALL_TASKS = tasks.TASK_NAMES     # eval.tasks="all": the text tasks; synthetic ones by name
CLOSED_SET_TASKS = tuple(n for f in FAMILIES for n in f.CLOSED_SET_TASKS)


def family(name: str):
  for f in FAMILIES:
    if name in f.TASK_NAMES:
      return f
  raise ValueError(f"name: unknown task {name!r} (known: {', '.join(TASK_NAMES)})")


def min_length(name: str) -> int:
  return family(name).min_length(name)


def check_args(name: str, length: int, depth: float, n_classes: int = 0) -> None:
  family(name)._check_args(name, length, depth, n_classes)


def make_example(name: str, **kwargs):
  return family(name).make_example(name, **kwargs)


def make_batch(name: str, **kwargs) -> dict:
  return family(name).make_batch(name, **kwargs)


def versions(names) -> dict:
  """The version of every family ``names`` draw from (the text family's always, so the
  settings ids of text-only evaluations are what they were before other families)."""
  out = {"tasks_version": tasks.TASKS_VERSION}
  if any(n in synthetic_tasks.TASK_NAMES for n in names):
    out["synthetic_tasks_version"] = synthetic_tasks.TASKS_VERSION
  return out
