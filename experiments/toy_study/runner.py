"""The prologue every finding's ``run.py`` shares: its command line, training what the
shared root lacks, exporting the runs' outputs into the committed store, reading them back
from it (every report is made from the store alone: ``--report-only`` reproduces it byte
for byte), refusing to report on too few seeds, and a headless figure."""

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from experiments.toy_study import config as T, store, study


# How a report's "--report-only regenerates this report" is meant, in every report: what
# experiments.check_reports compares (its docstring has the exact rule).
SAME_AS_MADE = ("byte for byte where numpy, scipy and matplotlib compute as where it was made (elsewhere, "
                "within the rounding that `python -m experiments.check_reports` accepts and names)")


@dataclasses.dataclass
class Invocation:
  root: str
  parallel: int
  no_train: bool
  report_only: bool
  store: Path               # the committed run outputs the report is made from
  out: Path                 # where REPORT.md and its figures go
  here: Path                # the finding's folder (its sweep.py)
  args: argparse.Namespace | None = None
  train_seconds: float = 0.0
  started: float = dataclasses.field(default_factory=time.monotonic)

  @property
  def finding(self) -> str:
    return self.here.name

  @property
  def fill(self) -> str:
    """The command that fills the store for this finding: a module, not a file path, so it
    runs from a fresh clone's root whether or not ``pip install -e .`` put ``experiments`` on
    the path (a file's own folder, not the root, is the path of ``python FILE``)."""
    return f"python -m experiments.{self.finding}.run"


def parse(doc: str, run_file: str, argv=None, default_store: Path = store.TOY_STUDY,
          default_root: str = T.ROOT, extra=lambda parser: None) -> Invocation:
  """``[--root R] [--parallel N] [--no-train | --report-only] [--store DIR] [--out DIR]``;
  ``extra(parser)`` adds a runner's own options (kept in ``inv.args``)."""
  here = Path(run_file).parent
  p = argparse.ArgumentParser(description=doc.splitlines()[0])
  p.add_argument("--root", default=default_root, help="the run root the runs are trained in")
  p.add_argument("--parallel", type=int, default=2)
  mode = p.add_mutually_exclusive_group()
  mode.add_argument("--no-train", action="store_true",
                    help="train nothing: analyse and export the root's finished runs, then report")
  mode.add_argument("--report-only", action="store_true",
                    help="report from the committed store alone (no root, no JAX compute)")
  p.add_argument("--store", default=str(default_store),
                 help="the committed run outputs the report is made from")
  p.add_argument("--out", default=str(here), help="where REPORT.md and its figures go")
  extra(p)
  a = p.parse_args(argv)
  return Invocation(a.root, a.parallel, a.no_train, a.report_only, Path(a.store), Path(a.out),
                    here, args=a)


def train_missing(inv: Invocation) -> Invocation:
  """Submit the finding's sweep (finished runs are skipped) unless ``--no-train`` or
  ``--report-only``; records the wall time it took in ``inv.train_seconds``."""
  t0 = time.monotonic()
  if not (inv.no_train or inv.report_only):
    study.cli("sweep", "submit", inv.here / "sweep.py", "--root", inv.root, "--parallel", inv.parallel)
  inv.train_seconds = time.monotonic() - t0
  return inv


def root_runs(inv: Invocation) -> list:
  """The root's finished runs (normal mode), one line and exit when the root is missing."""
  try:
    return study.load_runs(inv.root)
  except study.StudyInputError as e:
    sys.exit(f"{inv.finding}: {e} (train it with: {inv.fill})")


def export(inv: Invocation, runs, analysis: tuple[str, ...] = ()):
  """Copy the runs' outputs (and the analysis JSONs matching ``analysis``) into the store."""
  for run in {r.path: r for r in runs}.values():
    store.export_run(run, inv.store, analysis)
  print(f"{inv.finding}: exported {len({r.path for r in runs})} runs to {inv.store}")


def stored_runs(inv: Invocation) -> list:
  """The store's runs; one line naming the command that fills it when it is missing."""
  store.require(inv.store, inv.finding, inv.fill)
  return study.load_runs(inv.store)


def require_seeds(inv: Invocation, groups: dict, source: str, need: int = len(T.SEEDS)):
  """Exit with one line when a group has fewer finished runs than seeds: a report on fewer
  would claim an effect from what the study did not train. ``source``: "root" or "store"."""
  for name, runs in groups.items():
    if len(runs) < need:
      where = (f"under {inv.root} (see hybrid-jax sweep status {inv.root})" if source == "root"
               else f"in {store.display(inv.store)} (fill it with: {inv.fill})")
      sys.exit(f"{inv.finding}: {len(runs)} finished {name} runs {where}; need {need}")


def subplots(*args, **kwargs):
  """``plt.subplots`` on the headless Agg backend (the runners draw files, never windows)."""
  import matplotlib   # lazy: matplotlib costs ~0.7 s at import; only figure writers need it
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt   # lazy: matplotlib costs ~0.7 s at import; only figure writers need it
  return plt.subplots(*args, **kwargs)


def write(inv: Invocation, text: str):
  study.write_report(inv.out / "REPORT.md", text)
  print(f"wrote {inv.out / 'REPORT.md'}")
