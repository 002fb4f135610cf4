"""Finding 2 on MF and on an SWA hybrid that retrieves, and the position/distance check
(``rules.py``) in one command: trains the fresh seeds the root lacks, runs the analyses the
rules name on each final checkpoint, exports everything into
experiments/data/confirmatory_mf_swa, judges every registered claim and writes REPORT.md
here from the store (and from the pilot's store, experiments/data/confirmatory_mf_swa_pilot).

    python -m experiments.confirmatory_mf_swa.run [--root runs/confirmatory_mf_swa] [--parallel 2]
    python -m experiments.confirmatory_mf_swa.run --report-only     # from experiments/data alone
"""

from pathlib import Path

from experiments.confirmatory import ancestry, judge as J, measures as X, protocol as P
from experiments.confirmatory import run as first
from experiments.confirmatory.rules import full_attention as F2
from experiments.confirmatory_mf_swa import equivalence as E, pilot, rules as R
from experiments.confirmatory_retrieving import run as second
from experiments.toy_study import runner, store, study

STORE = store.CONFIRMATORY_MF_SWA
PILOT_STORE = store.CONFIRMATORY_MF_SWA_PILOT
HERE = Path("experiments/confirmatory_mf_swa")
# What the verdicts depend on, frozen before the data (tests/test_confirmatory_mf_swa.py runs
# ``ancestry.problems`` on these): this part's rules, statistic and sweep, the analyses'
# settings it reuses and the first set's protocol, statistics and measures.
RULE_FILES = (HERE / "rules.py", HERE / "equivalence.py", HERE / "sweep.py",
              Path("experiments/confirmatory/rules/full_attention.py"), *ancestry.PROTOCOL)
DATA = Path("experiments/data/confirmatory_mf_swa")
ANALYSIS_FILES = second.ANALYSIS_FILES          # constrain at cap 2, ablate, probe
CELL = "retrieval_acc/{task}/{length}/d{depth:.2f}"


def arm_runs(runs, label) -> list:
  a = R.ARMS[label]
  return [r for r in study.select(runs, size="toy-xs", pattern=a["pattern"], window=a["window"],
                                  pos_full=a["pos_full"], budget=P.BUDGET) if r.seed in R.SEEDS]


def main(argv=None):
  inv = runner.train_missing(runner.parse(__doc__, __file__, argv, default_store=STORE,
                                          default_root="runs/confirmatory_mf_swa"))
  if not inv.report_only:
    groups = {label: arm_runs(runner.root_runs(inv), label) for label in R.ARMS}
    second.analyse(groups, inv.parallel)
    runner.export(inv, [r for rs in groups.values() for r in rs], ANALYSIS_FILES)
  groups = {label: arm_runs(runner.stored_runs(inv), label) for label in R.ARMS}
  runner.write(inv, report(judge(groups), groups, pilot_runs()))


# --- the measures and the verdicts -------------------------------------------------------------

def cell(run, task: str, depth: float, length: int = 64):
  """The final evaluation's accuracy of one (task, length, depth) cell (None: not evaluated)."""
  return X.final(run, study.mean_of(CELL.format(task=task, length=length, depth=depth)))


def offset_shift(run):
  """kv_recall_offset at the far offset minus at offset 0, the distance fixed."""
  lo, hi = (cell(run, "kv_recall_offset", d) for d in R.OFFSET_DEPTHS)
  return None if lo is None or hi is None else hi - lo


def position(claim, runs):
  """A position claim on the seeds that retrieve (uncapped far acc at the cap's analysis)."""
  uncapped = X.values(runs, lambda r: first.uncapped_far(r, R.CAP))
  keep, said = J.retrieving(X.values(runs, offset_shift), uncapped)
  if len(keep) < J.MIN_RETRIEVING:
    return J.Result(claim, n=f"{len(keep)}", verdict=J.NO_RETRIEVAL, note=said)
  r = E.paired_tost(claim, keep)
  r.note = f"{said}; {r.note}"
  return r


def judge(groups) -> dict:
  """{"full_attention": [...], "position": [...]}: two families, each with its primary at
  0.05 and Holm over its secondaries."""
  swa, mf = groups[R.SWA], groups[R.MF]
  eff_swa, full_mf, eff_mf, heads_swa = R.SECONDARY
  capping = J.finish(first.capped(R.PRIMARY, swa, R.CAP, "full_constrained"),
                     [first.capped(eff_swa, swa, R.CAP, "efficient_constrained"),
                      first.capped(full_mf, mf, R.CAP, "full_constrained"),
                      first.capped(eff_mf, mf, R.CAP, "efficient_constrained"),
                      first.capped(heads_swa, swa, R.CAP, "heads")])
  pos_swa, pos_mf = R.POSITION_SECONDARY
  positions = J.finish(position(R.POSITION_PRIMARY, swa + mf),
                       [position(pos_swa, swa), position(pos_mf, mf)])
  return {"full_attention": capping, "position": positions}


# --- the pilot --------------------------------------------------------------------------------

def pilot_runs() -> list:
  return study.load_runs(PILOT_STORE) if store.has_runs(PILOT_STORE) else []


def pilot_table(runs) -> str:
  rows = []
  for name, c in pilot.CANDIDATES.items():
    picked = [r for r in runs if r.model["pos_full"] == c["model.pos_full"]
              and r.config.get("data", {}).get("min_distance", 1) == c["data.min_distance"]]
    finals = [X.final(r, X.FAR) for r in sorted(picked, key=lambda r: r.seed)]
    reach = sum(f is not None and f >= pilot.PICK_AT for f in finals)
    rows.append([name, ", ".join(first.fmt(f) for f in finals), f"{reach}/{len(finals)}",
                 first.fmt(sum(finals) / len(finals)) if finals and None not in finals else "-"])
  return study.markdown_table(["candidate", f"final far acc, seeds {', '.join(map(str, pilot.SEEDS))}",
                               f"seeds >= {pilot.PICK_AT}", "mean"], rows)


# --- the report -------------------------------------------------------------------------------

def per_seed_table(groups) -> str:
  rows = []
  for label in R.ARMS:
    for run in sorted(groups[label], key=lambda r: r.seed):
      rows.append([label, run.seed] + [first.fmt(v) for v in (
          X.final(run, X.FAR), first.uncapped_far(run, R.CAP),
          first.cap_drop(run, R.CAP, "full_constrained"),
          first.cap_drop(run, R.CAP, "efficient_constrained"), first.head_drop(run),
          X.probe_rise(run), offset_shift(run), X.filler_short(run))])
  return study.markdown_table(["arm", "seed", "final far acc (eval)", "uncapped far acc",
                               "full-capped drop", "efficient-capped drop", "head drop",
                               "probe rise", "offset shift", "short loss"], rows)


def position_table(groups, depths=(0.0, 0.25, 0.5)) -> str:
  """Mean final accuracy per arm (every seed, and the seeds that retrieve): by the fact's
  offset at distance 32 (kv_recall_offset) and by distance at offset 0 (kv_recall_start)."""
  def mean(runs, task, depth, length):
    v = [x for x in (cell(r, task, depth, length) for r in runs) if x is not None]
    return first.fmt(sum(v) / len(v)) if v else "-"

  rows = []
  for label in R.ARMS:
    every = groups[label]
    retrieving = [r for r in every if (first.uncapped_far(r, R.CAP) or 0) >= P.RETRIEVES]
    for which, runs in (("every seed", every), ("retrieving", retrieving)):
      for task, length in (("kv_recall_offset", 64), ("kv_recall_start", 64),
                           ("kv_recall_offset", 128), ("kv_recall_start", 128)):
        rows.append([label, f"{which} ({len(runs)})", task, length]
                    + [mean(runs, task, d, length) for d in depths])
  return study.markdown_table(["arm", "seeds", "task", "T"] + [f"depth {d:g}" for d in depths], rows)


POSITION_DOC = (
    "kv_recall_offset holds the distance at T // 2 (32 at T = 64, 64 at T = 128) and puts the "
    "fact at depth x the room there is: offsets 0, 7 and 14 at T = 64 (0, 15 and 31 at 128). "
    "kv_recall_start holds the fact at offset 0 and puts the query (1 - depth) of the filler "
    "after it: distances about 61, 46 and 31 at T = 64. Descriptive: no verdict reads this "
    "table.")


def commits(repo: Path = ancestry.REPO) -> dict:
  return {"rules": {str(p): ancestry.last_commit(repo, p) for p in RULE_FILES},
          "data": ancestry.first_commit(repo, DATA)}


def results_table(results) -> str:
  return study.markdown_table(
      ["claim", "role", "effect [interval]", "p", "n", "verdict", "note"],
      [[r.claim.key, r.claim.role, f"{first.fmt(r.effect)} [{first.fmt(r.lo)}, {first.fmt(r.hi)}]",
        first.fmt_p(r), r.n, f"**{r.verdict}**", r.note] for r in results])


def report(results: dict, groups, pilot_runs) -> str:
  c = commits()
  lines = ["# Confirmatory toy study, third part: finding 2 on MF and a retrieving SWA hybrid; "
           "position against distance", "",
           f"Made by `python -m experiments.confirmatory_mf_swa.run` from "
           f"`{store.display(STORE)}` and `{store.display(PILOT_STORE)}` (`--report-only` "
           f"regenerates it, {runner.SAME_AS_MADE}).", "",
           "The third part of the confirmatory set (the others: `experiments/confirmatory/REPORT.md`, "
           "`experiments/confirmatory_retrieving/REPORT.md`). Rules and the files the verdicts "
           "depend on, with their last commits, and the first commit of the data "
           "(tests/test_confirmatory_mf_swa.py fails when the data's does not descend from every "
           "one of them):", ""]
  lines += first.commit_lines(c, STORE) + [
            "", f"Seeds: {', '.join(str(s) for s in R.SEEDS)} (fresh), one run per arm and seed; "
            f"arms: {', '.join(f'{k} ({len(v)} runs)' for k, v in groups.items())}; toy-xs at "
            f"{P.BUDGET:g} N, as the first set.", "",
            R.__doc__.strip(), "", "## The pilot (exploratory, not counted)", "",
            pilot.__doc__.strip().split("\n\n    hybrid-jax")[0], "", pilot_table(pilot_runs), "",
            f"Picked by that rule: **{R.SWA_RECIPE}**.", "",
            "## Verdict rule", "", P.RULE, "",
            f"Tests: **one_sample**: {P.TESTS['one_sample']}. **paired_tost**: {R.PAIRED_TOST}.", "",
            "## Metrics", ""]
  lines += [f"- **{n}**: {w}" for n, w in R.METRICS]
  for family, rs in results.items():
    lines += ["", f"## {family}: claims as registered", "",
              study.markdown_table(["claim", "role", "the paper says", "effect", "paper's side",
                                    "test", "arms", "stands for", "differs"],
                                   P.claims_table([r.claim for r in rs])), "",
              f"## {family}: results", "", results_table(rs)]
  lines += ["", "Descriptive, not judged: " + "; ".join(R.DESCRIPTIVE) + ".",
            "", "## Every seed", "",
            "The measures behind the claims, per arm and seed (descriptive: no verdict reads this "
            f"table). A seed retrieves when its uncapped far acc is >= {P.RETRIEVES}; only those "
            "enter a claim.", "", per_seed_table(groups), "",
            "## Position and distance", "", POSITION_DOC, "", position_table(groups), "",
            "## Summary", ""]
  counts = {}
  for rs in results.values():
    for r in rs:
      counts[(r.claim.role, r.verdict)] = counts.get((r.claim.role, r.verdict), 0) + 1
  lines += ["Counted (confirmatory, this part): " + "; ".join(
      f"{role} {verdict}: {n}" for (role, verdict), n in sorted(counts.items())) + ".", "",
      "Exploratory (not counted): " + "; ".join(R.EXPLORATORY) + "."]
  return "\n".join(lines) + "\n"


if __name__ == "__main__":
  main()
