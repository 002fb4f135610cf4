"""The confirmatory set's third part (issue 47): finding 2 on MF and on an SWA hybrid that
retrieves, and position against distance; fresh seeds, rules committed before the data, a
report that judges from the store alone."""

import json

import pytest

from experiments.confirmatory import ancestry, protocol
from experiments.confirmatory_mf_swa import equivalence as E, pilot, rules as R, run
from experiments.confirmatory_mf_swa.sweep import get_sweep
from experiments.confirmatory_retrieving import rules as second
from experiments.toy_study import config as T


def test_the_rules_register_both_cap_halves_per_arm_fresh_seeds_and_the_position_claims():
  capping = (R.PRIMARY, *R.SECONDARY)
  assert R.PRIMARY.arms == (R.SWA,) and R.POSITION_PRIMARY.arms == (R.SWA, R.MF)
  assert all(c.role == "secondary" for c in R.SECONDARY + R.POSITION_SECONDARY)
  for c in capping:
    assert c.test in protocol.TESTS and set(c.arms) <= set(R.ARMS) and c.needs_retrieval, c.key
  halves = {(c.arms, c.side) for c in capping if "capping" in c.key}
  assert halves == {((a,), s) for a in R.ARMS for s in ("above", "below")}
  for c in (R.POSITION_PRIMARY, *R.POSITION_SECONDARY):
    assert c.test == "paired_tost" and c.side == "within" and c.needs_retrieval
  assert R.CAP < R.SF_WINDOW and R.SWA_RECIPE in R.RECIPES
  used = set(T.SEEDS) | set(protocol.SEEDS) | set(second.SEEDS) | set(pilot.SEEDS)
  assert len(R.SEEDS) >= 7 and not set(R.SEEDS) & used
  sweep = get_sweep()
  names = [tuple(sorted(p.items())) for p in sweep.grid]
  assert len(names) == len(set(names)) == len(R.ARMS) * len(R.SEEDS)
  assert sweep.base.eval.tasks == "kv_recall,kv_recall_start,kv_recall_offset"


def test_the_pilot_candidates_are_the_recipes_the_rules_can_pick():
  for name, c in pilot.CANDIDATES.items():
    assert R.RECIPES[name] == {"pos_full": c["model.pos_full"], "min_distance": c["data.min_distance"]}


def test_this_repositorys_third_part_data_came_after_its_rules():
  if ancestry.shallow():
    pytest.skip("a shallow clone holds too little history to order the commits")
  assert ancestry.problems(rules=list(run.RULE_FILES), data=run.DATA) == []


@pytest.mark.parametrize("diffs, p_below, reproduced", [
    ([0.0] * 7, True, True),                                 # exact at both offsets: equivalent
    ([0.03, -0.03, 0.0, 0.06, -0.06, 0.0, 0.03], True, True),
    ([0.3, 0.4, 0.35, 0.5, 0.3, 0.4, 0.45], False, False),  # position matters: outside +-0.1
    ([0.0, 0.0, 0.0, 0.0], False, None)])                   # 4 seeds: 2^-4 > 0.05, no verdict
def test_paired_equivalence_needs_both_one_sided_tests(diffs, p_below, reproduced):
  from experiments.confirmatory import judge as J
  r = E.paired_tost(R.POSITION_PRIMARY, diffs)
  assert (r.p < 0.05) == p_below and r.lo <= r.effect <= r.hi
  verdict = J.decide(r, r.p)
  assert verdict == {True: J.REPRODUCED, False: J.NOT_REPRODUCED, None: J.INCONCLUSIVE}[reproduced]


def _fabricate(root, *, swa_uncapped, mf_uncapped, mf_offset_shift):
  from test_study import fake_run
  from test_confirmatory import _sigmoid
  shifts = {R.SWA: 0.0, R.MF: mf_offset_shift}
  uncapped = {R.SWA: swa_uncapped, R.MF: mf_uncapped}
  for label in R.ARMS:
    arm = {k: v for k, v in R.ARMS[label].items() if k != "min_distance"}
    for seed in R.SEEDS:
      u, jitter = uncapped[label], 0.01 * (seed % 3)

      def offset_cells(step, u=u, label=label, jitter=jitter):
        return {f"retrieval_acc/{t}/{L}/d{d:.2f}": (u + (shifts[label] + jitter if d == 0.5 else 0))
                / (1 if L == 64 else 2) for t in ("kv_recall_offset", "kv_recall_start")
                for L in (64, 128) for d in (0.0, 0.25, 0.5)}

      path = fake_run(root, f"{label}-{seed}".replace(" ", "_").replace("=", "").replace(",", ""),
                      seed=seed, curve=_sigmoid(1444, 300 + 10 * (seed - 300), 0.9),
                      extra=offset_cells, **arm)
      out = path / "analysis"
      out.mkdir()
      (out / f"constrain-W{R.CAP}-beyond32-step1444.json").write_text(json.dumps(dict(
          beyond=32, settings=dict(none=dict(acc=u), full_constrained=dict(acc=0.02),
                                   efficient_constrained=dict(acc=u - jitter)))))
      (out / "ablate-k2-zero-beyond32-step1444.json").write_text(json.dumps(dict(
          beyond=32, acc=dict(none=u, top=0.1 + jitter, control=u - 0.02))))
      (out / "probe-C8-beyond32-step1444.json").write_text(json.dumps(dict(
          accuracy=[0.13, 0.2, 0.3, 0.9, 0.9], letters=label[:2] * 2, beyond=32)))


def _report(tmp_path, **fabric) -> str:
  from test_confirmatory_retrieving import report_from_root
  _fabricate(tmp_path / "root", **fabric)
  return report_from_root(tmp_path, run)


def _verdict(report, family, key):
  section = report.split(f"## {family}: results")[1].split("\n## ")[0]
  row = next(l for l in section.splitlines() if l.startswith(f"| {key} |"))
  return [c.strip() for c in row.strip("|").split("|")][5].strip("*")


def test_the_report_judges_capping_and_position_and_can_say_not_reproduced(tmp_path):
  report = _report(tmp_path, swa_uncapped=0.95, mf_uncapped=0.9, mf_offset_shift=-0.4)
  assert _verdict(report, "full_attention", R.PRIMARY.key) == "reproduced"
  assert _verdict(report, "full_attention", f"capping the efficient layers does not hurt, {R.SWA}") == "reproduced"
  assert _verdict(report, "position", f"far retrieval reads distance, not position, {R.SWA}") == "reproduced"
  assert _verdict(report, "position", "far retrieval reads distance, not position, MF") == "not reproduced"
  per_seed = report.split("## Every seed")[1].split("## Position and distance")[0]
  assert sum(l.startswith("| ") for l in per_seed.splitlines()) == 1 + 2 * len(R.SEEDS)
  assert "| -0.4" in per_seed or "| -0.39" in per_seed or "| -0.38" in per_seed


def test_an_arm_that_does_not_retrieve_gives_no_verdict_on_capping_or_position(tmp_path):
  report = _report(tmp_path, swa_uncapped=0.95, mf_uncapped=0.03, mf_offset_shift=0.0)
  assert _verdict(report, "full_attention", "capping the full layers hurts, MF") == "inconclusive: model does not retrieve"
  assert _verdict(report, "position", "far retrieval reads distance, not position, MF") == "inconclusive: model does not retrieve"
  assert "7 of 14 seeds retrieve" in report
