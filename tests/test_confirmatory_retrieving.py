"""Finding 2's second confirmatory part (issue 47): models that retrieve (GF, SF w=8), fresh
seeds, rules committed before the data, and a report that judges from the store alone."""

import json

import pytest

from experiments.confirmatory import ancestry, protocol
from experiments.confirmatory_retrieving import rules as R, run
from experiments.confirmatory_retrieving.sweep import get_sweep
from experiments.toy_study import config as T


def test_the_rules_register_one_primary_on_the_retrieving_arm_and_fresh_seeds_for_both_arms():
  claims = (R.PRIMARY, *R.SECONDARY)
  assert R.PRIMARY.role == "primary" and all(c.role == "secondary" for c in R.SECONDARY)
  assert R.PRIMARY.arms == (R.GF,)
  for c in claims:
    assert c.test in protocol.TESTS and set(c.arms) <= set(R.ARMS) and c.needs_retrieval, c.key
  halves = {(c.arms, c.side) for c in claims if "capping" in c.key}   # both halves, each arm
  assert halves == {((a,), s) for a in R.ARMS for s in ("above", "below")}
  assert R.CAP < R.SF_WINDOW                         # the efficient cap is a real cut
  assert len(R.SEEDS) >= 7 and not set(R.SEEDS) & (set(T.SEEDS) | set(protocol.SEEDS))
  sweep = get_sweep()
  names = [tuple(sorted(p.items())) for p in sweep.grid]
  assert len(names) == len(set(names)) == len(R.ARMS) * len(R.SEEDS)
  assert sweep.base.eval.tasks == ",".join(protocol.EVAL_TASKS)
  assert [list(p) for p in sweep.grid] == [list(T.point())] * len(sweep.grid)   # same run names


def test_this_repositorys_retrieving_data_came_after_its_rules():
  if ancestry.shallow():
    pytest.skip("a shallow clone holds too little history to order the commits")
  assert ancestry.problems(rules=list(run.RULE_FILES), data=run.DATA) == []


def _fabricate(root, *, gf_uncapped, sf_uncapped, gf_full_capped):
  from test_study import fake_run
  from test_confirmatory import _sigmoid
  for label, uncapped, full in ((R.GF, gf_uncapped, gf_full_capped), (R.SF8, sf_uncapped, 0.02)):
    for seed in R.SEEDS:
      curve = _sigmoid(1444, 300 + 10 * (seed - 200), 0.9)
      path = fake_run(root, f"{label}-{seed}".replace(" ", "_").replace("=", ""), seed=seed,
                      curve=curve, **R.ARMS[label])
      out = path / "analysis"
      out.mkdir()
      (out / f"constrain-W{R.CAP}-beyond32-step1444.json").write_text(json.dumps(dict(
          beyond=32, settings=dict(none=dict(acc=uncapped), full_constrained=dict(acc=full),
                                   efficient_constrained=dict(acc=uncapped - 0.01 * (seed % 3))))))
      (out / "ablate-k2-zero-beyond32-step1444.json").write_text(json.dumps(dict(
          beyond=32, acc=dict(none=uncapped, top=0.1 + 0.01 * (seed % 3), control=uncapped - 0.02))))
      (out / "probe-C8-beyond32-step1444.json").write_text(json.dumps(dict(
          accuracy=[0.13, 0.2, 0.3, 0.9, 0.9], letters="GFGF" if label == R.GF else "SFSF", beyond=32)))


def report_from_root(tmp_path, runner) -> str:
  """``runner.main`` on the fabricated root ``tmp_path/root`` (no training), then again from
  the store it exported alone: the two reports must be the same."""
  store, out, again = tmp_path / "store", tmp_path / "out", tmp_path / "again"
  runner.main(["--root", str(tmp_path / "root"), "--no-train", "--store", str(store), "--out", str(out)])
  runner.main(["--report-only", "--store", str(store), "--out", str(again)])
  report = (out / "REPORT.md").read_text()
  assert report == (again / "REPORT.md").read_text()          # from the store alone
  return report


def _report(tmp_path, **fabric) -> str:
  _fabricate(tmp_path / "root", **fabric)
  return report_from_root(tmp_path, run)


def _verdict(report, key):
  row = next(l for l in report.split("## Results")[1].splitlines() if l.startswith(f"| {key} |"))
  return [c.strip() for c in row.strip("|").split("|")][5].strip("*")


def test_the_report_judges_each_cap_half_apart_and_can_say_not_reproduced(tmp_path):
  report = _report(tmp_path, gf_uncapped=0.95, sf_uncapped=0.9, gf_full_capped=0.93)
  assert _verdict(report, R.PRIMARY.key) == "not reproduced"   # GF keeps retrieving when capped
  assert _verdict(report, "capping the efficient layers does not hurt, GF") == "reproduced"
  assert _verdict(report, f"capping the full layers hurts, {R.SF8}") == "reproduced"
  per_seed = report.split("## Every seed")[1].split("## Summary")[0]
  assert sum(l.startswith("| ") for l in per_seed.splitlines()) == 1 + 2 * len(R.SEEDS)
  assert "Counted (confirmatory, this part): primary not reproduced: 1" in report


def test_an_arm_that_does_not_retrieve_gives_no_verdict(tmp_path):
  report = _report(tmp_path, gf_uncapped=0.95, sf_uncapped=0.03, gf_full_capped=0.02)
  assert _verdict(report, R.PRIMARY.key) == "reproduced"
  assert _verdict(report, f"capping the full layers hurts, {R.SF8}") == "inconclusive: model does not retrieve"
