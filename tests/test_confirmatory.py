"""The confirmatory protocol (issue 47): one rule file per finding with exactly one primary
claim, every claim's test and arms registered; the sweep trains 7 fresh seeds per arm that
no exploratory run used; and the ancestry check fails when data came before its rules."""

import importlib
import subprocess

import pytest

from experiments.confirmatory import ancestry, arms, protocol
from experiments.confirmatory.rules import FINDINGS
from experiments.confirmatory.sweep import get_sweep
from experiments.toy_study import config as T


def _rules():
  return {f: importlib.import_module(f"experiments.confirmatory.rules.{f}") for f in FINDINGS}


def test_each_finding_registers_one_primary_claim_and_secondary_ones_with_known_tests_and_arms():
  labels = {a.label for a in arms.ARMS}
  for name, rules in _rules().items():
    claims = (rules.PRIMARY, *rules.SECONDARY)
    assert rules.PRIMARY.role == "primary" and all(c.role == "secondary" for c in rules.SECONDARY), name
    assert len({c.key for c in claims}) == len(claims), name
    for c in claims:
      assert c.test in protocol.TESTS, (name, c.key)
      assert set(c.arms) <= labels, (name, c.key)
      assert c.side in ("above", "below", "within") and c.stands_for and c.differs, (name, c.key)
      assert len(protocol.claims_table([c])[0]) == 9
    assert rules.METRICS and rules.EXPLORATORY, name


def test_the_primary_arms_get_seven_fresh_seeds_each():
  exploratory = set(T.SEEDS)
  sweep = get_sweep()
  for rules in _rules().values():
    for label in rules.PRIMARY.arms:
      arm = next(a for a in arms.ARMS if a.label == label)
      seeds = [p["train.seed"] for p in sweep.grid if p == {**p, **arm.points()[0], "train.seed": p["train.seed"]}]
      assert len(set(seeds)) >= 7 and not set(seeds) & exploratory, (label, seeds)
  names = [tuple(sorted(p.items())) for p in sweep.grid]
  assert len(names) == len(set(names)) == len(arms.ARMS) * len(protocol.SEEDS)
  assert sweep.base.eval.tasks == "kv_recall,kv_recall_start"


def _repo(tmp_path):
  repo = tmp_path / "repo"
  (repo / "rules").mkdir(parents=True)
  git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)
  git("init", "-q")
  git("config", "user.email", "t@example.com")
  git("config", "user.name", "t")
  return repo, git


def _commit(repo, git, path, text, message):
  (repo / path).parent.mkdir(parents=True, exist_ok=True)
  (repo / path).write_text(text)
  git("add", str(path))
  git("commit", "-q", "-m", message)


def test_ancestry_accepts_rules_then_data_and_refuses_data_then_rules(tmp_path):
  from pathlib import Path
  repo, git = _repo(tmp_path)
  rule, data = Path("rules/a.py"), Path("data")
  _commit(repo, git, rule, "MARGIN = 0.1\n", "rules")
  assert ancestry.problems(repo, [rule], data) == []               # rules, no data yet
  _commit(repo, git, data / "run/eval.jsonl", "{}\n", "data")
  assert ancestry.problems(repo, [rule], data) == []               # rules, then data
  (repo / rule).write_text("MARGIN = 0.2\n")                        # edited with data in view
  assert "changed since its last commit" in " ".join(ancestry.problems(repo, [rule], data))
  git("commit", "-q", "-am", "margin after the data")
  out = ancestry.problems(repo, [rule], data)
  assert len(out) == 1 and "does not come before the data's first commit" in out[0], out


def test_ancestry_refuses_a_rule_file_never_committed(tmp_path):
  from pathlib import Path
  repo, git = _repo(tmp_path)
  _commit(repo, git, Path("data/x"), "1\n", "data")
  (repo / "rules/b.py").write_text("X = 1\n")
  assert "never committed" in ancestry.problems(repo, [Path("rules/b.py")], Path("data"))[0]


def test_this_repositorys_confirmatory_data_came_after_its_rules():
  if ancestry.shallow():
    pytest.skip("a shallow clone holds too little history to order the commits")
  assert ancestry.problems() == []
