"""Exploratory pilot (seeds 900-902, not counted anywhere) that picks the SWA recipe of the
third confirmatory part, before its rules are written.

No SWA hybrid of the earlier sets retrieves reliably at toy-xs and 30 N (SF w=4: 1 of 7
fresh seeds, SF w=8: 1 of 7, NoPE-full SF w=4: 3 of 7). Two candidates, both with a window
of 8 (larger than the cap of 2, so capping the efficient layers is a real cut):

  far supervision  SF w=8 trained with the query-to-evidence distance log-uniform on
                   [16, 64] rather than [1, 64] (three times the share of training queries
                   beyond 32 tokens; ``data.min_distance = 16``)
  NoPE-full        SF w=8 with no position encoding on the full layers (the design the
                   paper recommends; it retrieved most often among the SWA hybrids)

Pick rule, fixed before the pilot ran: the candidate with more seeds whose final far
accuracy (kv_recall, T = 64, d >= 32) reaches 0.5; on a tie the higher mean final far
accuracy; then far supervision.

    hybrid-jax sweep submit experiments/confirmatory_mf_swa/pilot.py --root runs/confirmatory_mf_swa_pilot --parallel 2
    python -m experiments.confirmatory_mf_swa.pilot runs/confirmatory_mf_swa_pilot   # into the store
"""

import sys

from experiments.toy_study import config as T
from hybrid_jax.launch.grid import Sweep

SEEDS = (900, 901, 902)
PICK_AT = 0.5                      # the pick rule's far accuracy (protocol.RETRIEVES)
CANDIDATES = {
    "far supervision": {"model.pos_full": "rope", "data.min_distance": 16},
    "NoPE-full": {"model.pos_full": "nope", "data.min_distance": 1},
}


def points() -> list[dict]:
  return [{"model.size": "toy-xs", "model.pattern": "SF", "model.window": 8,
           "model.pos_full": c["model.pos_full"], "data.min_distance": c["data.min_distance"],
           "train.tokens_per_param": float(T.BUDGET), "train.seed": s}
          for s in SEEDS for c in CANDIDATES.values()]


def get_sweep():
  return Sweep(base=T.get_config(), grid=points())


def main(argv=None):
  """Export the pilot root's finished runs into experiments/data/confirmatory_mf_swa_pilot,
  where the third part's report reads them."""
  import argparse

  from experiments.toy_study import store, study   # lazy: sweep submit loads this file
  p = argparse.ArgumentParser(prog="python -m experiments.confirmatory_mf_swa.pilot",
                              description=main.__doc__.split(",")[0])
  p.add_argument("root", help="the pilot's run root (runs/confirmatory_mf_swa_pilot)")
  root = p.parse_args(sys.argv[1:] if argv is None else argv).root
  try:
    runs = study.load_runs(root)
  except study.StudyInputError as e:
    sys.exit(f"pilot: {e}")
  for run in runs:
    store.export_run(run, store.CONFIRMATORY_MF_SWA_PILOT)
  print(f"exported the pilot's runs to {store.display(store.CONFIRMATORY_MF_SWA_PILOT)}")


if __name__ == "__main__":
  main()
