"""Finding 2 on models that retrieve (``rules.py``) in one command: trains the fresh seeds the
root lacks, runs the analyses the rules name on each final checkpoint, exports everything
into experiments/data/confirmatory_retrieving, judges every registered claim and writes
REPORT.md here from the store.

    python -m experiments.confirmatory_retrieving.run [--root runs/confirmatory_retrieving] [--parallel 2]
    python -m experiments.confirmatory_retrieving.run --report-only     # from experiments/data alone
"""

from pathlib import Path

from experiments.confirmatory import ancestry, judge as J, measures as X, protocol as P
from experiments.confirmatory import run as first
from experiments.confirmatory.rules import full_attention as F2
from experiments.confirmatory_retrieving import rules as R
from experiments.toy_study import runner, store, study

STORE = store.DATA / "confirmatory_retrieving"
HERE = Path("experiments/confirmatory_retrieving")
# What the verdicts depend on, frozen before the data (tests/test_confirmatory_retrieving.py
# runs ``ancestry.problems`` on these): this part's rules and sweep, the analyses' settings it
# reuses and the first set's protocol, statistics and measures.
RULE_FILES = (HERE / "rules.py", HERE / "sweep.py",
              Path("experiments/confirmatory/rules/full_attention.py"), *ancestry.PROTOCOL)
DATA = Path("experiments/data/confirmatory_retrieving")
ANALYSIS_FILES = (f"constrain-W{R.CAP}-beyond{P.BEYOND}-step*.json",
                  f"ablate-k{F2.K}-zero-beyond{P.BEYOND}-step*.json",
                  f"probe-C{F2.CLASSES}-beyond{P.BEYOND}-step*.json")


def arm_runs(runs, label) -> list:
  a = R.ARMS[label]
  return [r for r in study.select(runs, size="toy-xs", pattern=a["pattern"], window=a["window"],
                                  pos_full="rope", budget=P.BUDGET) if r.seed in R.SEEDS]


def analyse(groups, parallel: int = 1):
  """constrain (cap R.CAP), ablate and probe on each final checkpoint, unless done;
  ``parallel`` children at a time."""
  todo = []
  for runs in groups.values():
    for run in runs:
      for name, stem in (("constrain", f"constrain-W{R.CAP}"), ("ablate", f"ablate-k{F2.K}-zero"),
                         ("probe", f"probe-C{F2.CLASSES}")):
        if not list((run.path / "analysis").glob(f"{stem}-beyond{P.BEYOND}-step*.json")):
          todo.append(("analyze", name, run.path, *F2.TASK, *F2.ANALYSES[name]))
  study.cli_all(todo, parallel)


def judge(groups) -> list:
  gf, sf = groups[R.GF], groups[R.SF8]
  eff_gf, full_sf, eff_sf, heads_gf = R.SECONDARY
  return J.finish(first.capped(R.PRIMARY, gf, R.CAP, "full_constrained"),
                  [first.capped(eff_gf, gf, R.CAP, "efficient_constrained"),
                   first.capped(full_sf, sf, R.CAP, "full_constrained"),
                   first.capped(eff_sf, sf, R.CAP, "efficient_constrained"),
                   first.capped(heads_gf, gf, R.CAP, "heads")])


def main(argv=None):
  inv = runner.train_missing(runner.parse(__doc__, __file__, argv, default_store=STORE,
                                          default_root="runs/confirmatory_retrieving"))
  if not inv.report_only:
    groups = {label: arm_runs(runner.root_runs(inv), label) for label in R.ARMS}
    analyse(groups, inv.parallel)
    runner.export(inv, [r for rs in groups.values() for r in rs], ANALYSIS_FILES)
  groups = {label: arm_runs(runner.stored_runs(inv), label) for label in R.ARMS}
  runner.write(inv, report(judge(groups), groups))


# --- the report -----------------------------------------------------------------------------

def per_seed_table(groups) -> str:
  rows = []
  for label in R.ARMS:
    for run in sorted(groups[label], key=lambda r: r.seed):
      rows.append([label, run.seed] + [first.fmt(v) for v in (
          X.final(run, X.FAR), first.uncapped_far(run, R.CAP), first.cap_drop(run, R.CAP, "full_constrained"),
          first.cap_drop(run, R.CAP, "efficient_constrained"), first.head_drop(run), X.probe_rise(run),
          X.filler_short(run))])
  return study.markdown_table(["arm", "seed", "final far acc (eval)", "uncapped far acc",
                               "full-capped drop", "efficient-capped drop", "head drop",
                               "probe rise", "short loss"], rows)


def commits(repo: Path = ancestry.REPO) -> dict:
  return {"rules": {str(p): ancestry.last_commit(repo, p) for p in RULE_FILES},
          "data": ancestry.first_commit(repo, DATA)}


def report(results, groups) -> str:
  c = commits()
  lines = ["# Confirmatory toy study, finding 2 on models that retrieve", "",
           f"Made by `python -m experiments.confirmatory_retrieving.run` from "
           f"`{store.display(STORE)}` (`--report-only` regenerates it, {runner.SAME_AS_MADE}).", "",
           "The second part of the confirmatory set (the first: `experiments/confirmatory/REPORT.md`). "
           "Rules and the files the verdicts depend on, with their last commits, and the first "
           "commit of the data (tests/test_confirmatory_retrieving.py fails when the data's does "
           "not descend from every one of them):", ""]
  lines += first.commit_lines(c, STORE) + [
            "", f"Seeds: {', '.join(str(s) for s in R.SEEDS)} (fresh), one run per arm and seed; "
            f"arms: {', '.join(f'{k} ({len(v)} runs)' for k, v in groups.items())}; toy-xs at "
            f"{P.BUDGET:g} N, as the first set.", "",
            R.__doc__.strip(), "", "## Verdict rule", "", P.RULE, "",
            f"Test: **one_sample**: {P.TESTS['one_sample']}.", "", "## Metrics", ""]
  lines += [f"- **{n}**: {w}" for n, w in R.METRICS]
  lines += ["", "## Claims as registered", "",
            study.markdown_table(["claim", "role", "the paper says", "effect", "paper's side",
                                  "test", "arms", "stands for", "differs"],
                                 P.claims_table([r.claim for r in results])), "",
            "Descriptive, not judged: " + "; ".join(R.DESCRIPTIVE) + ".", "", "## Results", "",
            study.markdown_table(["claim", "role", "effect [interval]", "p", "n", "verdict", "note"],
                                 [[r.claim.key, r.claim.role,
                                   f"{first.fmt(r.effect)} [{first.fmt(r.lo)}, {first.fmt(r.hi)}]",
                                   first.fmt_p(r), r.n, f"**{r.verdict}**", r.note] for r in results]),
            "", "## Every seed", "",
            "The measures behind the claims, per arm and seed (descriptive: no verdict reads this "
            f"table). A seed retrieves when its uncapped far acc is >= {P.RETRIEVES}; only those "
            "enter a claim.", "", per_seed_table(groups), "", "## Summary", ""]
  counts = {}
  for r in results:
    counts[(r.claim.role, r.verdict)] = counts.get((r.claim.role, r.verdict), 0) + 1
  lines += ["Counted (confirmatory, this part): " + "; ".join(
      f"{role} {verdict}: {n}" for (role, verdict), n in sorted(counts.items())) + "."]
  return "\n".join(lines) + "\n"


if __name__ == "__main__":
  main()
