"""The prologue every finding's ``run.py`` shares: its command line, training what the
shared root lacks, refusing to report on too few seeds, and a headless figure."""

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from experiments.toy_study import config as T, study


@dataclasses.dataclass
class Invocation:
  root: str
  parallel: int
  no_train: bool
  out: Path                 # where REPORT.md and its figures go
  here: Path                # the finding's folder (its sweep.py)
  train_seconds: float = 0.0
  started: float = dataclasses.field(default_factory=time.monotonic)


def parse(doc: str, run_file: str, argv=None) -> Invocation:
  """``[--root R] [--parallel N] [--no-train] [--out DIR]`` for the runner in ``run_file``."""
  here = Path(run_file).parent
  p = argparse.ArgumentParser(description=doc.splitlines()[0])
  p.add_argument("--root", default=T.ROOT)
  p.add_argument("--parallel", type=int, default=2)
  p.add_argument("--no-train", action="store_true", help="report on the finished runs only")
  p.add_argument("--out", default=str(here), help="where REPORT.md and its figures go")
  a = p.parse_args(argv)
  return Invocation(a.root, a.parallel, a.no_train, Path(a.out), here)


def train_missing(inv: Invocation) -> Invocation:
  """Submit the finding's sweep (finished runs are skipped) unless ``--no-train``; records
  the wall time it took in ``inv.train_seconds``."""
  t0 = time.monotonic()
  if not inv.no_train:
    study.cli("sweep", "submit", inv.here / "sweep.py", "--root", inv.root, "--parallel", inv.parallel)
  inv.train_seconds = time.monotonic() - t0
  return inv


def require_seeds(finding: str, groups: dict, root, need: int = len(T.SEEDS)):
  """Exit with one line when a group has fewer finished runs than seeds: a report on fewer
  would claim an effect from what the study did not train."""
  for name, runs in groups.items():
    if len(runs) < need:
      sys.exit(f"{finding}: {len(runs)} finished {name} runs under {root}; need {need} "
               f"(see hybrid-jax sweep status {root})")


def subplots(*args, **kwargs):
  """``plt.subplots`` on the headless Agg backend (the runners draw files, never windows)."""
  import matplotlib   # lazy: matplotlib costs ~0.7 s at import; only figure writers need it
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt   # lazy: matplotlib costs ~0.7 s at import; only figure writers need it
  return plt.subplots(*args, **kwargs)


def write(inv: Invocation, text: str):
  study.write_report(inv.out / "REPORT.md", text)
  print(f"wrote {inv.out / 'REPORT.md'}")
