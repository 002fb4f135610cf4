"""Every run of the study, in two sets.

The exploratory set, every run of the four findings once (a sweep file), in the order that
lets reports start early:

    hybrid-jax sweep submit experiments/all_findings.py --root runs/toy_study --parallel 2

first the three-seed toy-xs runs that findings 2-4 share (seed by seed, so a partial sweep
already holds whole seeds), then the scaling grid's other sizes and budgets, smallest
first. Each finding's ``run.py --no-train`` then reports from the shared root.

The confirmatory set (issue 47: one primary claim per finding, 7 fresh seeds per arm, rules
frozen in experiments/confirmatory/rules/ before those seeds were trained):

    python -m experiments.all_findings --confirmatory [--root runs/confirmatory] [--parallel 2]

is ``python -m experiments.confirmatory.run`` with the same options (``main`` hands every
option but ``--confirmatory`` to its ``main``, which validates them: ``--root``,
``--parallel``, ``--no-train``, ``--report-only``, ``--store``, ``--out``): it trains the 28
runs the root lacks (four arms x seeds 100-106), runs the analyses the rules name, exports
them into experiments/data/confirmatory and writes experiments/confirmatory/REPORT.md.

CPU budget (issue 47's target: at most 120 minutes on 2 cores): the confirmatory set took
about 92 minutes on 2 cores through ``python -m experiments.confirmatory.run``, the code
path ``--confirmatory`` calls: 85 minutes of training for the 28 runs with ``--parallel 2``
(the store's ``train.json`` files sum to 168 core-minutes) and about 6 minutes of analyses.
"""

import argparse
import sys
from pathlib import Path

from experiments.toy_study.config import get_config
from hybrid_jax.launch.grid import Sweep, load_sweep

HERE = Path(__file__).parent
FINDINGS = ("scaling", "full_attention_carries_retrieval", "large_window_laziness", "nope_on_full")
SIZE_ORDER = {"toy-3xs": 0, "toy-2xs": 1, "toy-xs": 2}
CONFIRMATORY_MINUTES = 92        # measured on 2 cores: 85 of training (--parallel 2) + ~6 of analyses
CPU_BUDGET_MINUTES = 120         # issue 47's target for the confirmatory set on 2 cores


def get_sweep():
  """The findings' grids, deduplicated; a run any of findings 2-4 uses comes first, by seed."""
  grids = {f: load_sweep(HERE / f / "sweep.py").grid for f in FINDINGS}
  shared = {_key(p) for f in FINDINGS[1:] for p in grids[f]}
  points = list({_key(p): p for f in FINDINGS for p in grids[f]}.values())
  points.sort(key=lambda p: (0, p["train.seed"]) if _key(p) in shared else
              (1, SIZE_ORDER[p["model.size"]], p["train.tokens_per_param"]))
  return Sweep(base=get_config(), grid=points)


def _key(point: dict) -> tuple:
  return tuple(sorted(point.items()))


def main(argv=None):
  """``--confirmatory [options]``: the confirmatory runner's ``main`` on the other options.
  Without ``--confirmatory``, a usage error naming the sweep command of the exploratory set."""
  p = argparse.ArgumentParser(
      prog="python -m experiments.all_findings", description=__doc__.splitlines()[0],
      epilog="The exploratory set is a sweep file: hybrid-jax sweep submit "
             "experiments/all_findings.py --root runs/toy_study --parallel 2. Every option but "
             "--confirmatory goes to python -m experiments.confirmatory.run (its --help lists them).")
  p.add_argument("--confirmatory", action="store_true",
                 help="train, analyse, export and report the confirmatory set "
                      f"(about {CONFIRMATORY_MINUTES} minutes on 2 cores)")
  a, rest = p.parse_known_args(sys.argv[1:] if argv is None else argv)
  if not a.confirmatory:
    p.error("--confirmatory is the only set this command runs; the exploratory set runs with "
            "hybrid-jax sweep submit experiments/all_findings.py --root runs/toy_study --parallel 2")
  from experiments.confirmatory import run as confirmatory   # lazy: sweep submit loads this file
  return confirmatory.main(rest)


if __name__ == "__main__":
  main()
