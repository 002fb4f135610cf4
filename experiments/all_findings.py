"""Every run of the study, in two sets.

The exploratory set, every run of the four findings once (a sweep file), in the order that
lets reports start early:

    hybrid-jax sweep submit experiments/all_findings.py --root runs/toy_study --parallel 2

first the three-seed toy-xs runs that findings 2-4 share (seed by seed, so a partial sweep
already holds whole seeds), then the scaling grid's other sizes and budgets, smallest
first. Each finding's ``run.py --no-train`` then reports from the shared root.

The confirmatory set (issue 47: one primary claim per finding, 7 fresh seeds per arm, rules
frozen before those seeds were trained), in three parts, each with its own root and store:

    python -m experiments.all_findings --confirmatory [--parallel 2] [--no-train | --report-only]

runs ``python -m experiments.confirmatory.run`` (four arms x seeds 100-106; rules in
experiments/confirmatory/rules/) and then ``python -m experiments.confirmatory_retrieving.run``
(finding 2 on models that retrieve: GF and SF w=8 x seeds 200-206; rules in its rules.py),
then ``python -m experiments.confirmatory_mf_swa.run`` (finding 2 on MF and on SF w=8 with
NoPE on its full layers, the SWA recipe its pilot picked, x seeds 300-306, and position
against distance; rules in its rules.py), each with those options: each trains the runs its root lacks, runs the analyses its rules
name, exports them into its store and writes its REPORT.md. ``--root``, ``--store`` and
``--out`` name one part's folders, so they go to the first part only, which runs alone then.

CPU budget (issue 47's target: at most 120 minutes on 2 cores), measured through each part's
runner with ``--parallel 2``: the first part about 92 minutes (85 of training the 28 runs,
the store's ``train.json`` files summing to 168 core-minutes, and ~6 of analyses, with other
work on the cores); the second, rerun on an idle host with the current code, about 42
minutes (14 runs: GF 374-437 s each, SF w=8 187-228 s, analyses two at a time; first
measured at 62 with other work on the cores); the third about 39 minutes (14 runs, SF w=8
NoPE-full 184-214 s each and MF 261-301 s, then 7 minutes of analyses one at a time). All
three: about 173 minutes, over the target. The first part has not been rerun: from the
other two's per-run times (an SF run ~205 s, LF ~1.1x, ~30 s of start-up a run, analyses two
at a time) it would take about 60, so the whole set about 140 minutes on an otherwise idle
2-core host: still over.
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
RETRIEVING_MINUTES = 42          # the second part, rerun on an idle host (first measured: 62)
MF_SWA_MINUTES = 39              # the third part, the same way (its analyses still one at a time)
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
                 help="train, analyse, export and report the confirmatory set's three parts "
                      f"(about {CONFIRMATORY_MINUTES} + {RETRIEVING_MINUTES} + {MF_SWA_MINUTES} "
                      "minutes on 2 cores)")
  a, rest = p.parse_known_args(sys.argv[1:] if argv is None else argv)
  if not a.confirmatory:
    p.error("--confirmatory is the only set this command runs; the exploratory set runs with "
            "hybrid-jax sweep submit experiments/all_findings.py --root runs/toy_study --parallel 2")
  from experiments.confirmatory import run as confirmatory   # lazy: sweep submit loads this file
  from experiments.confirmatory_mf_swa import run as mf_swa
  from experiments.confirmatory_retrieving import run as retrieving
  confirmatory.main(rest)
  if not any(arg.split("=")[0] in ("--root", "--store", "--out") for arg in rest):
    retrieving.main(rest)
    mf_swa.main(rest)

if __name__ == "__main__":
  main()
