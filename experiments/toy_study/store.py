"""The committed store of run outputs every report is made from: ``experiments/data/``.

One folder per run (named as in the run root), holding what the reports read and nothing
else: ``config.json``, ``status.json``, ``metrics.jsonl``, ``eval.jsonl``, ``train.json``
(the training's wall time, measured from the checkpoints' timestamps at export) and
``analysis/`` with the analysis JSONs the findings use. No checkpoints: a few MB in all.

The store has the shape of a run root (``study.load_runs`` reads it as one), so a report
made from the store is the same whether the runs were just trained or not: the runners
export first and always report from the store.
"""

import json
import sys
from pathlib import Path

from hybrid_jax.run import atomic_write_bytes, atomic_write_text

DATA = Path(__file__).parents[1] / "data"
TOY_STUDY = DATA / "toy_study"          # the four findings' runs (they share their runs)
CALIBRATION = DATA / "calibration"      # the calibration runs of experiments/README.md
PAPER_MIX = DATA / "paper_mix"          # the paper-faithful data option's runs
RUN_FILES = ("config.json", "status.json", "metrics.jsonl", "eval.jsonl")


def export_run(run, store: Path, analysis: tuple[str, ...] = ()) -> Path:
  """Copy one finished run's outputs (``run``: a ``study.StudyRun``) into ``store``;
  ``analysis``: glob patterns of the ``analysis/*.json`` files a report reads (of each
  pattern the files present are all copied). Files are replaced atomically, so an
  interrupted export leaves every file whole."""
  out = Path(store) / run.path.name
  out.mkdir(parents=True, exist_ok=True)
  for name in RUN_FILES:
    src = run.path / name
    if src.exists():
      atomic_write_bytes(out / name, src.read_bytes())
  atomic_write_text(out / "train.json", json.dumps({"train_seconds": run.train_seconds()}) + "\n")
  for pattern in analysis:
    for src in sorted((run.path / "analysis").glob(pattern)):
      if src.suffix == ".json":
        (out / "analysis").mkdir(exist_ok=True)
        atomic_write_bytes(out / "analysis" / src.name, src.read_bytes())
  return out


def has_runs(store: Path) -> bool:
  store = Path(store)
  return store.is_dir() and any(p.is_dir() for p in store.iterdir())


def require(store: Path, finding: str, fill: str):
  """Exit with one line naming the command that fills the store when it is missing or empty."""
  if not has_runs(store):
    sys.exit(f"{finding}: no stored run outputs in {display(store)}; fill it with: {fill}")


def display(path: Path) -> str:
  """``path`` relative to the repository when it lies inside (reports name no machine paths)."""
  try:
    return str(Path(path).resolve().relative_to(DATA.parents[1].resolve()))
  except ValueError:
    return str(path)

