"""The confirmatory study in one command: trains the fresh seeds the root lacks, runs the
analyses the rules name, exports everything into experiments/data/confirmatory, judges every
registered claim and writes REPORT.md here from the store.

    python -m experiments.confirmatory.run [--root runs/confirmatory] [--parallel 2]
    python -m experiments.confirmatory.run --report-only     # from experiments/data alone
"""

import importlib
import math

import numpy as np

from experiments.confirmatory import ancestry, arms as A, judge as J, measures as X, protocol as P
from experiments.confirmatory.rules import FINDINGS
from experiments.confirmatory.rules import full_attention as F2, laziness as F3
from experiments.toy_study import runner, store, study

STORE = store.DATA / "confirmatory"
EXPLORATORY_REPORTS = {"scaling": "scaling", "full_attention": "full_attention_carries_retrieval",
                       "laziness": "large_window_laziness", "nope": "nope_on_full"}


def rules(finding):
  return importlib.import_module(f"experiments.confirmatory.rules.{finding}")


def analyse(groups, parallel: int = 1):
  """The analyses of the rules, on each final checkpoint (trace: every checkpoint), unless
  done; ``parallel`` children at a time."""
  todo = []
  for run in groups[A.SF4.label]:
    for name, stem in (("constrain", f"constrain-W{F2.CAP}"), ("ablate", f"ablate-k{F2.K}-zero"),
                       ("probe", f"probe-C{F2.CLASSES}")):
      if not list((run.path / "analysis").glob(f"{stem}-beyond{P.BEYOND}-step*.json")):
        todo.append(("analyze", name, run.path, *F2.TASK, *F2.ANALYSES[name]))
  for run in groups[A.LF.label]:
    if X.constrain(run, F2.CAP_LF) is None:
      todo.append(("analyze", "constrain", run.path, *F2.TASK, *F2.ANALYSES["constrain_lf"]))
  for run in groups[A.SF4.label] + groups[A.SF32.label]:
    if X.trace(run) is None:
      todo.append(("analyze", "trace", run.path, *F3.TRACE))
  study.cli_all(todo, parallel)


ANALYSIS_FILES = (f"constrain-W{F2.CAP}-beyond{P.BEYOND}-step*.json",
                  f"constrain-W{F2.CAP_LF}-beyond{P.BEYOND}-step*.json",
                  f"ablate-k{F2.K}-zero-beyond{P.BEYOND}-step*.json",
                  f"probe-C{F2.CLASSES}-beyond{P.BEYOND}-step*.json", X.TRACE_FILE)


def main(argv=None):
  inv = runner.train_missing(runner.parse(__doc__, __file__, argv, default_store=STORE,
                                          default_root="runs/confirmatory"))
  if not inv.report_only:
    groups = {a.label: X.arm_runs(runner.root_runs(inv), a) for a in A.ARMS}
    analyse(groups, inv.parallel)
    runner.export(inv, [r for rs in groups.values() for r in rs], ANALYSIS_FILES)
  groups = {a.label: X.arm_runs(runner.stored_runs(inv), a) for a in A.ARMS}
  results = {f: judge(f, groups) for f in FINDINGS}
  runner.write(inv, report(results, groups))


# --- judging each finding -------------------------------------------------------------------

def _by_seed(runs, fn) -> dict:
  return {r.seed: fn(r) for r in runs}


def judge(finding, groups) -> list:
  return {"scaling": _scaling, "full_attention": _full_attention, "laziness": _laziness,
          "nope": _nope}[finding](rules(finding), groups)


def _scaling(R, g):
  fast, slow = g[A.SF4.label], g[A.LF.label]
  speed = lambda metric: (X.values(fast, lambda r: X.tokens_to(r, metric)),      # noqa: E731
                          X.values(slow, lambda r: X.tokens_to(r, metric)))
  at = lambda runs, b: X.values(runs, lambda r: X.read_at(r, X.FAR, b))          # noqa: E731
  reads = lambda runs: [(x, y) for x, y in zip(at(runs, P.READ_AT[0]), at(runs, P.READ_AT[-1]))]  # noqa: E731
  shrink = lambda a, b: (np.abs(a[..., 0].mean(-1) - b[..., 0].mean(-1))          # noqa: E731
                         - np.abs(a[..., 1].mean(-1) - b[..., 1].mean(-1)))
  primary = J.gehan(R.PRIMARY, *speed(X.FAR))
  c30, shrinks, start = R.SECONDARY
  return J.finish(primary, [J.tost(c30, at(slow, P.READ_AT[-1]), at(fast, P.READ_AT[-1])),
                            J.bootstrap(shrinks, reads(fast), reads(slow), shrink),
                            J.gehan(start, *speed(X.FAR_START))])


def uncapped_far(run, cap):
  """The constrain analysis' own far acc without a cap (None: not analysed at ``cap``)."""
  return (X.constrain(run, cap) or {}).get("none")


def cap_drop(run, cap, setting):
  """Uncapped far acc minus far acc under ``setting`` (None: not analysed at ``cap``)."""
  c = X.constrain(run, cap)
  return None if c is None else c["none"] - c[setting]


def head_drop(run):
  """The drop with the top heads zeroed minus the drop with random heads zeroed."""
  a = X.ablate(run)
  return None if a is None else (a["none"] - a["top"]) - (a["none"] - a["control"])


def capped(claim, runs, cap, setting):
  """A capping/ablation/probe claim on the seeds that retrieve (uncapped, at ``cap``)."""
  uncapped = X.values(runs, lambda r: uncapped_far(r, cap))
  if setting in ("full_constrained", "efficient_constrained"):
    vals = X.values(runs, lambda r: cap_drop(r, cap, setting))
  elif setting == "heads":
    vals = X.values(runs, head_drop)
  else:
    vals = X.values(runs, X.probe_rise)
  keep, said = J.retrieving(vals, uncapped)
  if len(keep) < J.MIN_RETRIEVING:
    return J.Result(claim, n=f"{len(keep)}", verdict=J.NO_RETRIEVAL, note=said)
  r = J.one_sample(claim, keep)
  r.note = said
  return r


def _full_attention(R, g):
  sf4, lf = g[A.SF4.label], g[A.LF.label]
  eff, full_lf, eff_lf, heads, probe = R.SECONDARY
  return J.finish(capped(R.PRIMARY, sf4, F2.CAP, "full_constrained"),
                  [capped(eff, sf4, F2.CAP, "efficient_constrained"),
                   capped(full_lf, lf, F2.CAP_LF, "full_constrained"),
                   capped(eff_lf, lf, F2.CAP_LF, "efficient_constrained"),
                   capped(heads, sf4, F2.CAP, "heads"), capped(probe, sf4, F2.CAP, "probe")])


def _laziness(R, g):
  small, large = g[A.SF4.label], g[A.SF32.label]
  form, entropy, drift, converge = R.SECONDARY
  return J.finish(
      J.gehan(R.PRIMARY, X.values(small, lambda r: X.tokens_to(r, X.FAR)),
              X.values(large, lambda r: X.tokens_to(r, X.FAR))),
      [J.gehan(form, X.values(small, X.tokens_to_form), X.values(large, X.tokens_to_form)),
       J.permutation(entropy, X.values(small, X.entropy_at), X.values(large, X.entropy_at)),
       J.gehan(drift, X.values(small, X.q_drift), X.values(large, X.q_drift)),
       J.tost(converge, X.values(small, lambda r: X.final(r, X.FAR)),
              X.values(large, lambda r: X.final(r, X.FAR)))])


def _nope(R, g):
  rope, nope = g[A.SF4.label], g[A.SF4_NOPE.label]
  pair = lambda fn: (_by_seed(rope, fn), _by_seed(nope, fn))                   # noqa: E731
  all128, start, cost, count = R.SECONDARY
  b, t = pair(X.filler_short)
  pct = {s: None if b[s] is None or t.get(s) is None else 100 * (t[s] - b[s]) / b[s] for s in b}
  return J.finish(J.sign_flip(R.PRIMARY, *pair(lambda r: X.final(r, X.FAR))),
                  [J.sign_flip(all128, *pair(lambda r: X.final(r, X.ALL128))),
                   J.sign_flip(start, *pair(lambda r: X.final(r, X.FAR_START))),
                   J.one_sample(cost, list(pct.values())),
                   J.fisher(count, X.values(rope, lambda r: X.final(r, X.FAR)),
                            X.values(nope, lambda r: X.final(r, X.FAR)))])


# --- the report -----------------------------------------------------------------------------

def fmt(x) -> str:
  if x is None or (isinstance(x, float) and math.isnan(x)):
    return "-"
  if isinstance(x, float) and math.isinf(x):
    return "inf"
  return f"{x:.3g}"


def fmt_p(r) -> str:
  return "-" if r.p is None else (f"{r.p:.3g}" + (f" (Holm {r.p_holm:.3g})" if r.p_holm is not None else ""))


def exploratory_verdict(finding, key) -> str:
  """The verdict the exploratory report (seeds 0-2) gave a claim of the same name, read from
  its committed REPORT.md; '-' when it judged none so named."""
  path = store.DATA.parent / EXPLORATORY_REPORTS[finding] / "REPORT.md"
  if not path.exists():
    return "-"
  for line in path.read_text().splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) >= 4 and cells[0] == key and cells[-1].startswith("**"):
      return cells[-1].strip("*")
  return "-"


SECOND_PART = (
    "Second part, on models that retrieve (GF and SF w=8, fresh seeds 200-206, its own rules "
    "committed before them): `experiments/confirmatory_retrieving/REPORT.md`, counted there, "
    "not here.")

PER_SEED_DOC = (
    "The measures behind the claims, per arm and seed (descriptive: no verdict reads this "
    "table). Tokens in millions; '>' the budget when the threshold was never reached; "
    f"uncapped: the constrain analysis' own far acc, which decides whether a seed retrieves "
    f"(>= {P.RETRIEVES}); '-' where the arm has no such analysis.")


def per_seed_table(groups) -> str:
  def mtok(t):
    return "-" if t is None else (">" if math.isinf(t) else f"{t / 1e6:.2f}")

  caps = {A.SF4.label: F2.CAP, A.LF.label: F2.CAP_LF}      # the arms the rules constrain

  rows = []
  for arm in A.ARMS:
    for run in sorted(groups[arm.label], key=lambda r: r.seed):
      rows.append([arm.label, run.seed, mtok(X.tokens_to(run, X.FAR)), fmt(X.final(run, X.FAR)),
                   fmt(X.final(run, X.FAR_START)), fmt(uncapped_far(run, caps[arm.label]) if arm.label in caps else None),
                   fmt(X.filler_short(run))])
  return study.markdown_table(["arm", "seed", "tokens to emerge (M)", "final far acc",
                               "final far acc, fact at offset 0", "uncapped far acc",
                               "short loss"], rows)


def commit_lines(commits: dict, data) -> list[str]:
  """The rule files' last commits and the data's first, one line each (``check_reports``
  masks exactly these lines in a shallow clone)."""
  return ([f"- `{f}`: {h[:12] if h else 'uncommitted'}" for f, h in commits["rules"].items()]
          + [f"- data `{store.display(data)}`: {commits['data'][:12] if commits['data'] else 'not yet committed'}"])


def report(results, groups) -> str:
  c = ancestry.commits()
  seeds = ", ".join(str(s) for s in P.SEEDS)
  lines = ["# Confirmatory toy study: rules frozen before fresh seeds", "",
           f"Made by `python -m experiments.confirmatory.run` from `{store.display(STORE)}` "
           f"(`--report-only` regenerates it, {runner.SAME_AS_MADE}).", "",
           "Rules: one file per finding under `experiments/confirmatory/rules/`, with the "
           "shared `protocol.py` and `arms.py`; their last commits, and the first commit of the "
           "data (tests/test_confirmatory.py fails when the data's does not descend from every "
           "rule file's):", ""]
  lines += commit_lines(c, STORE) + [
            "", f"Seeds: {seeds} (fresh: the exploratory study used 0-2), one run per arm and "
            f"seed; arms: {', '.join(f'{a.label} ({len(groups[a.label])} runs)' for a in A.ARMS)}.", "",
            "## Verdict rule", "", P.RULE, "", "Tests:", ""]
  lines += [f"- **{k}**: {v}" for k, v in P.TESTS.items()]
  summary = []
  for finding, rs in results.items():
    R = rules(finding)
    lines += ["", f"## {finding}", "", R.__doc__.strip(), "", "Metrics:", ""]
    lines += [f"- **{n}**: {w}" for n, w in R.METRICS]
    lines += ["", "Claims as registered:", "",
              study.markdown_table(["claim", "role", "the paper says", "effect", "paper's side",
                                    "test", "arms", "stands for", "differs"],
                                   P.claims_table([r.claim for r in rs])), "",
              "Results:", "",
              study.markdown_table(["claim", "role", "effect [interval]", "p", "n", "verdict", "note"],
                                   [[r.claim.key, r.claim.role, f"{fmt(r.effect)} [{fmt(r.lo)}, {fmt(r.hi)}]",
                                     fmt_p(r), r.n, f"**{r.verdict}**", r.note] for r in rs]), "",
              "Exploratory (seeds 0-2, rules written after their data; not counted): " + "; ".join(R.EXPLORATORY) + "."]
    if finding == "full_attention":
      lines += ["", SECOND_PART]
    summary += [[finding, r.claim.key, r.claim.role, f"{fmt(r.effect)} [{fmt(r.lo)}, {fmt(r.hi)}]",
                 r.n, r.verdict, exploratory_verdict(finding, r.claim.key)] for r in rs]
  lines += ["", "## Every seed", "", PER_SEED_DOC, "", per_seed_table(groups)]
  counts = {}
  for row in summary:
    counts[(row[2], row[5])] = counts.get((row[2], row[5]), 0) + 1
  lines += ["", "## Summary", "",
            study.markdown_table(["finding", "claim", "role", "effect [interval]", "n", "verdict",
                                  "exploratory verdict"], summary), "",
            "Counted (confirmatory only): " + "; ".join(
                f"{role} {verdict}: {n}" for (role, verdict), n in sorted(counts.items())) + "."]
  return "\n".join(lines) + "\n"

if __name__ == "__main__":
  main()
