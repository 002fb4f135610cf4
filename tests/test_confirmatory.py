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


# --- the judged report, on a fabricated root of the four arms -------------------------------

def _sigmoid(n_steps, onset, top, points=12):
  import numpy as np
  steps = np.unique(np.linspace(n_steps / points, n_steps, points).round().astype(int))
  if onset is None:
    return [(int(s), 0.02, 3.0 - 0.2 * s / n_steps) for s in steps]
  return [(int(s), float(top / (1 + np.exp(-(s - onset) / 40))), 3.0 - 0.2 * s / n_steps) for s in steps]


def _fabricate(root, *, onsets, nope_boost, retrieves_lf):
  """Seven fresh seeds of each arm. ``onsets[label]``: the step far retrieval emerges at
  (None: never); SF w=4 capped at 2 loses its full layers' retrieval; LF retrieves only
  when ``retrieves_lf``."""
  import json
  import numpy as np
  from test_study import fake_run
  specs = {"SF w=4": dict(pattern="SF", window=4), "SF w=32": dict(pattern="SF", window=32),
           "SF w=4, NoPE-full": dict(pattern="SF", window=4, pos_full="nope"),
           "LF": dict(pattern="LF", window=16)}
  for label, spec in specs.items():
    for seed in protocol.SEEDS:
      onset = onsets[label]
      curve = _sigmoid(1444, None if onset is None else onset + 15 * (seed - 100), 0.9)
      if "NoPE" in label:
        curve = [(s, min(1.0, a + nope_boost), l * 1.001) for s, a, l in curve]
      start = lambda step, c=dict((s, a) for s, a, _ in curve): {        # noqa: E731
          "retrieval_acc_by_distance/kv_recall_start/64/32-64": c[step],
          "retrieval_n_by_distance/kv_recall_start/64/32-64": 64}
      path = fake_run(root, f"{label}-{seed}".replace(" ", "_").replace("=", "").replace(",", ""),
                      seed=seed, curve=curve, extra=start, **spec)
      out = path / "analysis"
      out.mkdir()
      final = curve[-1][1]
      cap = 2 if label.startswith("SF w=4") else 4
      uncapped = final if label != "LF" or retrieves_lf else 0.05
      (out / f"constrain-W{cap}-beyond32-step1444.json").write_text(json.dumps(dict(
          beyond=32, settings=dict(none=dict(acc=uncapped), full_constrained=dict(acc=0.02),
                                   efficient_constrained=dict(acc=uncapped - 0.01 * (seed % 3))))))
      (out / "ablate-k2-zero-beyond32-step1444.json").write_text(json.dumps(dict(
          beyond=32, acc=dict(none=uncapped, top=0.1 + 0.01 * (seed % 3), control=uncapped - 0.02))))
      (out / "probe-C8-beyond32-step1444.json").write_text(json.dumps(dict(
          accuracy=[0.13, 0.2 + 0.01 * (seed % 3), 0.9], letters="SF", beyond=32)))
      tokens = np.arange(1, 15) * 100 * 4096
      steps = tokens / 4096
      rise = (np.zeros_like(steps) if onset is None
              else 0.8 / (1 + np.exp(-(steps - onset - 15 * (seed - 100)) / 50)))
      head = lambda m: dict(layer=1, head=0, mass=float(m), norm_entropy=1 - float(m),   # noqa: E731
                            q_rel_l2=1 - float(m), k_rel_l2=1 - float(m))
      (out / "trace-F-beyond32.json").write_text(json.dumps(dict(beyond=32, top_heads=[[1, 0]], points=[
          dict(step=int(s), tokens=int(t), heads=[head(m)] * 2) for s, t, m in zip(steps, tokens, rise)])))


def _verdict(report, key):
  row = next(l for l in report.split("## Summary")[1].splitlines() if f"| {key} |" in l)
  return [c.strip() for c in row.strip("|").split("|")][5]


def _report(tmp_path, **fabric):
  from experiments.confirmatory import run
  _fabricate(tmp_path / "root", **fabric)
  store, out, again = tmp_path / "store", tmp_path / "out", tmp_path / "again"
  run.main(["--root", str(tmp_path / "root"), "--no-train", "--store", str(store), "--out", str(out)])
  run.main(["--report-only", "--store", str(store), "--out", str(again)])
  report = (out / "REPORT.md").read_text()
  assert report == (again / "REPORT.md").read_text()
  return report


def test_the_report_judges_every_registered_claim_from_the_store_alone(tmp_path):
  report = _report(tmp_path, onsets={"SF w=4": 300, "SF w=32": 900, "SF w=4, NoPE-full": 300, "LF": 800},
                   nope_boost=0.05, retrieves_lf=True)
  rules = _rules()
  for r in rules.values():
    for c in (r.PRIMARY, *r.SECONDARY):
      assert f"| {c.key} |" in report.split("## Summary")[1], c.key
  assert _verdict(report, "emergence speed") == "reproduced"          # LF emerges later in every seed
  assert _verdict(report, "emergence delay") == "reproduced"          # SF w=32 later than w=4
  assert _verdict(report, "capping the full layers hurts") == "reproduced"
  assert _verdict(report, "capping the efficient layers does not hurt") == "reproduced"
  assert "Holm" in report and "Clopper-Pearson" in report
  assert report.index("## Verdict rule") < report.index("## Summary")
  per_seed = report.split("## Every seed")[1].split("## Summary")[0]
  assert sum(l.startswith("| ") for l in per_seed.splitlines()) == 1 + 4 * 7   # header, 28 runs


def test_a_window_that_never_learns_is_not_a_delay_and_a_model_that_cannot_retrieve_gives_no_verdict(tmp_path):
  report = _report(tmp_path, onsets={"SF w=4": 300, "SF w=32": None, "SF w=4, NoPE-full": 300, "LF": None},
                   nope_boost=0.0, retrieves_lf=False)
  assert _verdict(report, "emergence delay") == "never learns"
  assert _verdict(report, "emergence speed") == "never learns"
  assert _verdict(report, "capping the full layers hurts, LF") == "inconclusive: model does not retrieve"
  assert _verdict(report, "far@64") != "reproduced"                    # no NoPE gain fabricated



def test_check_reports_compares_the_report_without_commit_lines_only_in_a_shallow_clone(tmp_path, monkeypatch):
  """The report prints its rules' and data's commits; a shallow clone cannot make them, so
  there (and only there) check_reports masks exactly those lines, and says so."""
  from experiments import check_reports as C
  report = _report(tmp_path, onsets={"SF w=4": 300, "SF w=32": 900, "SF w=4, NoPE-full": 300, "LF": 800},
                   nope_boost=0.05, retrieves_lf=True).encode()
  masked = C.without_commits(report)
  assert masked.count(b": (commit)") == len(ancestry.rule_files()) + 1
  assert C.without_commits(report.replace(b"Seeds: ", b"Seeds:  ")) != masked   # other text counts
  committed = tmp_path / "committed"
  committed.mkdir()
  (committed / "REPORT.md").write_bytes(
      C._COMMIT_LINE.sub(lambda m: b"- " + m.group(1) + b": 0123456789ab", report))
  for shallow in (False, True):
    monkeypatch.setattr(C, "_commits_unknown", lambda finding, s=shallow: s)
    rounded = []
    out = C.report_differences("confirmatory", tmp_path / "store", committed, rounded=rounded)
    assert bool(out) != shallow, out
    assert (C.SHALLOW in " ".join(rounded)) == shallow


def test_all_findings_runs_the_confirmatory_set_through_its_runner(monkeypatch):
  """``python -m experiments.all_findings --confirmatory [options]`` is the confirmatory
  runner's main on the other options (nothing trains here: the runner is replaced); without
  ``--confirmatory`` it is a usage error, and the file is still the exploratory sweep."""
  from pathlib import Path

  from experiments import all_findings
  from experiments.confirmatory import run as confirmatory
  from experiments.confirmatory_mf_swa import run as mf_swa
  from experiments.confirmatory_retrieving import run as retrieving
  called = []
  monkeypatch.setattr(confirmatory, "main", lambda argv=None: called.append(("first", argv)))
  monkeypatch.setattr(retrieving, "main", lambda argv=None: called.append(("second", argv)))
  monkeypatch.setattr(mf_swa, "main", lambda argv=None: called.append(("third", argv)))
  all_findings.main(["--confirmatory", "--parallel", "2"])
  all_findings.main(["--root", "elsewhere", "--confirmatory", "--report-only"])
  assert called == [("first", ["--parallel", "2"]), ("second", ["--parallel", "2"]),
                    ("third", ["--parallel", "2"]),
                    ("first", ["--root", "elsewhere", "--report-only"])]   # a root is one part's
  with pytest.raises(SystemExit) as e:
    all_findings.main(["--root", "runs/c"])
  assert e.value.code == 2 and len(called) == 4
  assert callable(all_findings.get_sweep)
  # the CPU figures, stated where a reader looks, with whether they meet issue 47's budget
  total = (all_findings.CONFIRMATORY_MINUTES + all_findings.RETRIEVING_MINUTES
           + all_findings.MF_SWA_MINUTES)
  readme = (Path(all_findings.__file__).parent / "README.md").read_text()
  assert "python -m experiments.all_findings --confirmatory" in readme
  for text in (all_findings.__doc__, " ".join(readme.split())):
    text = " ".join(text.split())
    assert f"about {all_findings.CONFIRMATORY_MINUTES} minutes" in text
    assert f"about {all_findings.RETRIEVING_MINUTES} minutes" in text
    assert f"about {all_findings.MF_SWA_MINUTES} minutes" in text
    assert f"about {total} minutes, " + ("within" if total <= all_findings.CPU_BUDGET_MINUTES
                                          else "over") + " the target" in text
