"""A run's checkpoints as models, the NIAH examples the analyses score, and their outputs
(JSON and figures, written atomically into ``<run>/analysis/``)."""

import io
import json
from pathlib import Path

import numpy as np

from hybrid_jax.data import task_families
from hybrid_jax.eval.checkpoints import EvalInputError, RunModels
from hybrid_jax.eval.retrieval import task_inputs
from hybrid_jax.flax_nnx import nnx
from hybrid_jax.run import atomic_write_bytes, atomic_write_text, checkpoint_steps, load_config

DEFAULT_TASK = "niah_single_filler"


class AnalysisInputError(EvalInputError):
  """An analysis cannot run as asked: one line, raised before any compute."""


class Run:
  """One run directory: its config, checkpoint steps and a model per step."""

  def __init__(self, workdir):
    self.path = Path(workdir)
    load_config(workdir)          # one-line errors: no directory, no config.json
    self.steps = checkpoint_steps(workdir)
    self._models = None

  def check_step(self, step: int | None) -> int:
    if step is None:
      return self.steps[-1]
    if step not in self.steps:
      raise AnalysisInputError(f"--step: run {self.path} has no checkpoint {step} "
                               f"(it has {', '.join(map(str, self.steps))})")
    return step

  @property
  def models(self) -> RunModels:
    if self._models is None:
      self._models = RunModels(self.path)
    return self._models

  @property
  def cfg(self):
    return self.models.cfg

  def model(self, step: int):
    return nnx.merge(self.models.graphdef, self.models.params(step), self.models.rest)

  def params(self, step: int):
    return self.models.params(step)

  def tokens(self, step: int) -> int:
    """Training tokens seen at ``step`` (as eval.jsonl counts them)."""
    return step * self.cfg.train.batch_size * self.cfg.data.seq_len

  @property
  def out_dir(self) -> Path:
    return self.path / "analysis"

  def close(self):
    if self._models is not None:
      self._models.close()


def niah_examples(cfg, task: str, length: int, samples: int, n_classes: int = 0, seed=None,
                  beyond: int = 0):
  """``samples`` examples of ``task`` at depths spread evenly over (0, 1), indices 0..N-1
  at ``eval.seed``: the same inputs for every run and checkpoint. With ``beyond`` = W, only
  needles more than W tokens before their answer (beyond every window up to W, so a head or
  probe is scored on what no efficient layer can reach), drawn from a finer depth grid."""
  tokenizer, corpus = task_inputs(cfg)
  seed = cfg.eval.seed if seed is None else seed
  make = lambda depth, i: task_families.make_example(
      task, length=length, depth=depth, seed=seed, index=i, tokenizer=tokenizer, corpus=corpus,
      n_classes=n_classes)
  if not beyond:
    return [make((i + 0.5) / samples, i) for i in range(samples)]
  grid = 8 * samples
  kept = [ex for ex in (make((i + 0.5) / grid, i) for i in range(grid))
          if needle_distance(ex) > beyond]
  if len(kept) < samples:
    raise AnalysisInputError(f"--beyond: only {len(kept)} of {grid} {task} examples at --length "
                             f"{length} have their needle more than {beyond} tokens back; "
                             f"need --samples {samples} (lower one of them, or raise --length)")
  step = len(kept) / samples                # spread the kept ones over their depths
  return [kept[int(i * step)] for i in range(samples)]


def needle_distance(ex) -> int:
  """Tokens from the needle's last token before the answer to the answer's first token."""
  first = int(ex.answer_positions[0])
  before = [int(e) for e in ex.evidence_positions if e < first]
  return first - max(before) if before else 0


def check_task(task: str, length: int, n_classes: int = 0):
  try:
    task_families.family(task)
  except ValueError as e:
    raise AnalysisInputError(f"--task: {str(e).split(':', 1)[1].strip()}") from None
  if n_classes and task not in task_families.CLOSED_SET_TASKS:
    raise AnalysisInputError(f"--task: {task} has no closed-set answer to probe "
                             f"(closed-set tasks: {', '.join(task_families.CLOSED_SET_TASKS)})")
  try:
    task_families.check_args(task, length, 0.5, n_classes)
  except ValueError as e:
    arg = str(e).split(":", 1)[0]
    flag = {"name": "--task", "length": "--length", "n_classes": "--classes"}.get(arg, arg)
    raise AnalysisInputError(f"{flag}: {str(e).split(':', 1)[1].strip()}") from None


def check_positive(name: str, value, minimum: int = 1):
  if value is None or int(value) < minimum:
    raise AnalysisInputError(f"{name}: must be >= {minimum} (got {value})")


def write_json(path: Path, record: dict) -> Path:
  atomic_write_text(path, json.dumps(record, indent=1, default=_jsonable) + "\n")
  return path


def _jsonable(x):
  if isinstance(x, np.generic):
    return x.item()
  if isinstance(x, np.ndarray):
    return x.tolist()
  raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def write_figure(fig, stem: Path) -> list[Path]:
  """``stem``.png and .svg, each written whole or not at all."""
  import matplotlib.pyplot as plt   # lazy: matplotlib costs ~0.7 s at import; only figure writers need it
  paths = []
  for ext, kw in (("png", dict(dpi=120)), ("svg", {})):
    buf = io.BytesIO()
    fig.savefig(buf, format=ext, bbox_inches="tight", **kw)
    path = stem.with_suffix(f".{ext}")
    atomic_write_bytes(path, buf.getvalue())
    paths.append(path)
  plt.close(fig)
  return paths
