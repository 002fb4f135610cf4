"""Reading a study's runs for its report: which runs are which, their eval curves aligned
over seeds, how many examples an accuracy pools, and the tables and band figures the
experiments/ reports are made of (intervals: ``bootstrap``; verdicts: ``verdicts``).

A report must not average curves that were evaluated differently: ``curves`` aligns seeds
on the eval steps they share.
"""

import dataclasses
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from hybrid_jax.run import RunDir, architecture_label, atomic_write_text
from hybrid_jax.run.checkpoints import COMMIT_FILE


class StudyInputError(ValueError):
  """A study root or run that a report cannot be made from; the message is one line."""


@dataclasses.dataclass
class StudyRun:
  path: Path
  config: dict
  curve: list      # eval records under the run's latest settings id, by step

  @property
  def model(self) -> dict:
    return self.config["model"]

  @property
  def seed(self) -> int:
    return self.config["train"]["seed"]

  @property
  def n(self) -> int:
    return self.config["derived"]["non_embedding_params"]

  @property
  def tokens(self) -> int:
    return self.config["derived"]["tokens"] if "tokens" in self.config["derived"] else \
        self.curve[-1]["tokens"]

  @property
  def budget(self):
    return self.config["train"].get("tokens_per_param")

  @property
  def label(self) -> str:
    return architecture_label(self.model)     # "F", "SF w=4", "SF w=4 NoPE-full"

  def matches(self, **where) -> bool:
    """``size="toy-xs", pattern="SF", window=4, pos_full="rope", seed=0, budget=30.0``."""
    have = dict(size=self.model["size"], pattern=self.model["pattern"],
                window=self.model["window"], pos_full=self.model["pos_full"],
                seed=self.seed, budget=self.budget)
    unknown = set(where) - set(have)
    if unknown:
      raise TypeError(f"unknown selector {sorted(unknown)[0]!r}")
    return all(have[k] == v for k, v in where.items())

  def train_seconds(self) -> float | None:
    """Wall time of the training, from the first checkpoint's to the final status's
    timestamp (the compile before step 1 is left out): enough to state a run's cost. A
    stored run (no checkpoints) carries the figure in its ``train.json``."""
    stored = self.path / "train.json"
    if stored.exists():
      return json.loads(stored.read_text())["train_seconds"]
    status = RunDir(self.path, writer=False).read_status() or {}
    first = RunDir(self.path, writer=False).checkpoint_dir / "1"
    if status.get("state") != "done" or not first.exists():
      return None
    end = datetime.datetime.strptime(status["updated"], "%Y-%m-%dT%H:%M:%S%z").timestamp()
    # The step's commit file when it has one (a bucket's directories carry no time), else
    # the directory itself (renamed into place when the save finished).
    stamp = first / COMMIT_FILE if (first / COMMIT_FILE).exists() else first
    return max(0.0, end - stamp.stat().mtime)




def load_runs(root) -> list[StudyRun]:
  """Every finished run under ``root`` (a run still training or failed is left out: a
  report on half a curve would misstate the final values)."""
  root = Path(root)
  if not root.is_dir():
    raise StudyInputError(f"study root {root} does not exist")
  runs = []
  for path in sorted(p for p in root.iterdir() if p.is_dir()):
    rd = RunDir(path, writer=False)
    status = rd.read_status() or {}
    if status.get("state") != "done" or not rd.config_path.exists():
      continue
    runs.append(StudyRun(path, json.loads(rd.config_path.read_text()), settings_curve(rd.read_eval())))
  return runs


def settings_curve(records, which: int = -1) -> list:
  """The eval records of one settings id, by step: of the last record's (``which=-1``, what a
  report reads) or of the first (``which=0``: the evaluations made during training)."""
  sid = records[which].get("settings_id") if records else None
  return sorted((r for r in records if r.get("settings_id") == sid), key=lambda r: r["step"])


def select(runs, **where) -> list[StudyRun]:
  return sorted((r for r in runs if r.matches(**where)), key=lambda r: r.seed)


def mean_of(*keys):
  """A metric function: the mean of several eval keys (None when one is missing)."""
  def metric(record):
    values = [record.get(k) for k in keys]
    return None if any(v is None for v in values) else float(np.mean(values))
  metric.keys = keys
  return metric


def examples_of(runs, metric) -> int | None:
  """How many evaluation examples one value of ``metric`` pools (per run and checkpoint),
  from the eval settings: a depth cell ``retrieval_acc/<task>/<L>/d<depth>`` holds
  ``eval.examples``, a length cell ``retrieval_acc/<task>/<L>`` one per depth. None when a
  key is not an accuracy or the records carry no settings (then intervals are over seeds
  only)."""
  settings = runs[0].curve[-1].get("settings") if runs and runs[0].curve else None
  if not settings or "examples" not in settings:
    return None
  n = 0
  for key in getattr(metric, "keys", ()):
    parts = key.split("/")
    if parts[0] != "retrieval_acc" or len(parts) < 3:
      return None
    n += settings["examples"] * (1 if len(parts) == 4 else len(settings.get("depths", [1])))
  return n or None


def curves(runs, metric) -> tuple[np.ndarray, np.ndarray]:
  """(tokens_K, values_SxK): each run's metric on the eval steps every run has."""
  if not runs:
    raise StudyInputError("no finished run matches")
  per_run = [{r["step"]: (r["tokens"], metric(r)) for r in run.curve if metric(r) is not None}
             for run in runs]
  steps = sorted(set.intersection(*(set(p) for p in per_run)))
  if not steps:
    raise StudyInputError(f"runs {', '.join(r.path.name for r in runs)} share no evaluated step")
  tokens_K = np.array([per_run[0][s][0] for s in steps], dtype=float)
  values_SxK = np.array([[p[s][1] for s in steps] for p in per_run], dtype=float)
  return tokens_K, values_SxK


def markdown_table(header, rows) -> str:
  cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
  lines = ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(r) + " |" for r in cells[1:]]
  return "\n".join(lines)


def band_figure(ax, groups: dict, *, ylabel: str, chance: float | None = None, logx=True):
  """One line per group (the mean over seeds) and a band from the min to the max seed."""
  for name, (tokens_K, values_SxK) in groups.items():
    mean_K = values_SxK.mean(axis=0)
    line, = ax.plot(tokens_K, mean_K, lw=1.6, label=f"{name} (n={values_SxK.shape[0]})")
    if values_SxK.shape[0] > 1:
      ax.fill_between(tokens_K, values_SxK.min(axis=0), values_SxK.max(axis=0),
                      color=line.get_color(), alpha=0.18, lw=0)
  if chance is not None:
    ax.axhline(chance, color="0.5", ls=":", lw=1, label="chance")
  ax.set(xlabel="training tokens", ylabel=ylabel)
  if logx:
    ax.set_xscale("log")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)


def cli(*args, check: bool = True) -> float:
  """Run ``hybrid-jax ARGS...`` in a child process (what a user would type; a child's
  memory goes back when it ends) and return its wall time in seconds."""
  t0 = time.monotonic()
  result = subprocess.run([sys.executable, "-m", "hybrid_jax.cli", *map(str, args)])
  if check and result.returncode != 0:
    raise StudyInputError(f"hybrid-jax {' '.join(map(str, args[:2]))} failed "
                          f"(exit {result.returncode}); its message is above")
  return time.monotonic() - t0


def cli_all(commands, parallel: int = 1) -> float:
  """Run each ``hybrid-jax`` argument list in a child, ``parallel`` at a time: with more than
  one, each child single-threaded on a core of its own, as sweep workers are (two such
  processes do more on two cores than one two-threaded). Returns the wall seconds; the first
  child that fails raises StudyInputError once the others have ended."""
  from hybrid_jax.launch import local   # lazy: the launcher is needed only where runs are analysed
  t0 = time.monotonic()
  env = local.single_threaded(os.environ) if parallel > 1 else dict(os.environ)
  free = local.worker_cpus(parallel) or [None] * max(1, parallel)
  pending, running, failed = [list(map(str, c)) for c in commands], {}, []
  while pending or running:
    while pending and free:
      cpu, args = free.pop(0), pending.pop(0)
      proc = subprocess.Popen([sys.executable, "-m", "hybrid_jax.cli", *args], env=env,
                              preexec_fn=local.start_on(cpu))
      running[proc] = (cpu, args)
    for proc in [p for p in running if p.poll() is not None]:
      cpu, args = running.pop(proc)
      free.append(cpu)
      if proc.returncode != 0:
        failed.append(f"hybrid-jax {' '.join(args[:2])} failed (exit {proc.returncode}); its message is above")
    time.sleep(0.05)
  if failed:
    raise StudyInputError(failed[0])
  return time.monotonic() - t0


def train_minutes(runs, workers: int = 2) -> tuple[float, float]:
  """(sum of the runs' training minutes, the wall minutes on ``workers`` parallel workers
  if every run were trained from scratch: the cost a reader would pay to rerun them)."""
  seconds = [s for s in (r.train_seconds() for r in runs) if s is not None]
  total = sum(seconds) / 60
  return total, total / max(1, min(workers, len(seconds) or 1))


def save_figure(fig, path) -> str:
  """Write a PNG next to the report and return its file name for a markdown link."""
  import matplotlib.pyplot as plt   # lazy: matplotlib costs ~0.7 s at import; only figure writers need it
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.tight_layout()
  # No "Software" stamp (it names the matplotlib version): the same data give the same bytes.
  fig.savefig(path, dpi=110, metadata={"Software": None})
  plt.close(fig)
  return path.name


def write_report(path, text: str):
  """REPORT.md, written atomically (a crash mid-write leaves the previous report whole)."""
  Path(path).parent.mkdir(parents=True, exist_ok=True)
  atomic_write_text(path, text)
