"""The paper reproductions in experiments/: their grids (dry-run) and their reports, made
from fabricated finished runs (the real ones take an hour of CPU; the reports' numbers come
from these files, so a wrong selection or a wrong verdict shows here)."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from experiments.toy_study import config as T
from hybrid_jax.launch.grid import load_sweep, plan
from source_imports import imported_modules
from test_study import fake_run

EXPERIMENTS = Path(__file__).parents[1] / "experiments"
FINDINGS = ("scaling", "full_attention_carries_retrieval", "large_window_laziness", "nope_on_full")


def planned(finding):
  runs = plan(load_sweep(EXPERIMENTS / finding / "sweep.py"))
  assert all(r.error is None for r in runs), [r.error for r in runs if r.error]
  return runs


def load_runner(finding):
  spec = importlib.util.spec_from_file_location(f"_run_{finding}", EXPERIMENTS / finding / "run.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_grids_share_their_runs_and_use_the_toy_setting():
  grids = {f: planned(f) for f in FINDINGS}
  assert {f: len(g) for f, g in grids.items()} == {
      "scaling": 5 * 3 * 4 + 4 * 2, "full_attention_carries_retrieval": 4,
      "large_window_laziness": 12, "nope_on_full": 9}
  scaling = {r.name for r in grids["scaling"]}
  # Every model another finding needs is the scaling grid's run of the same name, except
  # the NoPE-full hybrid: the findings train each model once in the shared root.
  for f in FINDINGS[1:]:
    extra = {r.name for r in grids[f]} - scaling
    assert all("pos_full=nope" in name for name in extra), extra
  assert sum("pos_full=nope" in r.name for r in grids["nope_on_full"]) == 3
  for r in grids["large_window_laziness"] + grids["nope_on_full"]:
    cfg = r.resolved
    assert (cfg.data.seq_len, cfg.data.n_pairs, cfg.train.batch_size) == (64, 8, 64)
    assert cfg.derived.tokens == pytest.approx(30 * cfg.derived.non_embedding_params, rel=0.01)
    assert cfg.train.seed in T.SEEDS and cfg.eval.every == 100
  windows = sorted({r.resolved.model.window for r in grids["large_window_laziness"]
                    if r.resolved.model.pattern == "SF"})
  assert windows == [4, 16, 32]
  sizes = {r.resolved.model.size: r.resolved.derived.non_embedding_params for r in grids["scaling"]
           if r.resolved.model.pattern == "F"}
  assert sorted(sizes.values()) == [sizes["toy-3xs"], sizes["toy-2xs"], sizes["toy-xs"]]
  assert sizes["toy-xs"] / sizes["toy-3xs"] > 7
  budgets = sorted({r.resolved.train.tokens_per_param for r in grids["scaling"]})
  assert budgets == [3.75, 7.5, 15.0, 30.0]


def _sigmoid_curve(n_steps, onset, top=0.6, short0=3.0, points=8):
  steps = np.unique(np.linspace(n_steps / points, n_steps, points).round().astype(int))
  return [(int(s), float(top / (1 + np.exp(-(s - onset) / (0.05 * n_steps + 1)))),
           short0 - 0.2 * s / n_steps) for s in steps]


def _main_runs(root, onset_by_label, *, nope_boost=0.0):
  """Three seeds of each toy-xs 30 N model, far retrieval emerging at ``onset`` steps."""
  specs = {"F": dict(pattern="F", window=16), "SF w=4": dict(pattern="SF", window=4),
           "SF w=16": dict(pattern="SF", window=16), "SF w=32": dict(pattern="SF", window=32),
           "LF": dict(pattern="LF", window=16),
           "SF w=4 NoPE-full": dict(pattern="SF", window=4, pos_full="nope")}
  for label, onset in onset_by_label.items():
    for seed in T.SEEDS:
      curve = _sigmoid_curve(1444, onset + 20 * seed)
      if "NoPE" in label:
        curve = [(s, a + nope_boost, l + 0.001) for s, a, l in curve]
      fake_run(root, f"{label}-{seed}".replace(" ", "_").replace("=", ""), seed=seed, **specs[label],
               curve=curve)


def test_nope_report(tmp_path):
  _main_runs(tmp_path, {"F": 300, "SF w=4": 400, "SF w=4 NoPE-full": 400}, nope_boost=0.1)
  load_runner("nope_on_full").main(["--root", str(tmp_path), "--no-train", "--out", str(tmp_path / "out")])
  report = (tmp_path / "out" / "REPORT.md").read_text()
  assert (tmp_path / "out" / "nope_on_full.png").stat().st_size > 10_000
  assert "far@64: NoPE-full minus RoPE = +0.100 on average" in report
  assert "higher for every seed: NoPE-full retrieves better at the training length" in report
  assert "all@128: NoPE-full minus RoPE = +0.050" in report   # fake_run: acc/2 at 128
  assert "short-context loss: NoPE-full minus RoPE = +0.0010 nats (higher for every seed)" in report
  assert "a negligible short-context cost" in report.split("## What did not")[0]


def test_nope_report_refuses_missing_seeds(tmp_path):
  _main_runs(tmp_path, {"F": 300, "SF w=4": 400})
  with pytest.raises(SystemExit, match="0 finished SF w=4 NoPE-full runs"):
    load_runner("nope_on_full").main(["--root", str(tmp_path), "--no-train", "--out", str(tmp_path)])
  assert not (tmp_path / "REPORT.md").exists()


def _trace(path, tokens, mass_K, letters="SFSF", top_heads=((1, 0), (3, 1))):
  out = path / "analysis"
  out.mkdir(parents=True, exist_ok=True)
  points = [dict(step=int(t // 4096), tokens=int(t), heads=[dict(
      layer=1, head=0, mass=float(m), norm_entropy=1 - float(m), q_rel_l2=1 - float(m),
      k_rel_l2=1 - float(m))] * 2)
      for t, m in zip(tokens, mass_K)]
  (out / "trace.json").write_text(json.dumps(dict(top_heads=[list(h) for h in top_heads], points=points)))
  (out / "trace-F.json").write_text(json.dumps(dict(top_heads=[[1, 0], [3, 1]], points=points)))


def test_laziness_report(tmp_path):
  _main_runs(tmp_path, {"F": 300, "SF w=4": 300, "SF w=16": 500, "SF w=32": 900})
  tokens = np.arange(1, 15) * 100 * 4096
  for path in tmp_path.iterdir():
    if path.name.startswith("SF"):
      onset = {"4": 300, "16": 500, "32": 900}[path.name.split("-")[0][4:]]
      _trace(path, tokens, 0.8 / (1 + np.exp(-(tokens / 4096 - onset) / 50)))
  load_runner("large_window_laziness").main(["--root", str(tmp_path), "--no-train",
                                            "--out", str(tmp_path / "out")])
  report = (tmp_path / "out" / "REPORT.md").read_text()
  assert "the largest window is the slowest, and every large-window seed is slower" in report
  assert "later with the larger window." in report and "not later" not in report
  # The table's emergence column: w=32 emerges near step 900 (+20 per seed) of 4096 tokens.
  row = next(line for line in report.splitlines() if line.startswith("| SF w=32"))
  emerge = float(row.split("|")[2].split("±")[0])
  assert 3.3 < emerge < 4.2
  assert "| 1 ± 0 [1, 1] |" in row     # both top heads sit in F layers


def test_full_attention_report(tmp_path):
  _main_runs(tmp_path, {"SF w=4": 300, "LF": 300})
  for path in tmp_path.iterdir():
    out = path / "analysis"
    out.mkdir()
    (out / "constrain-W4-step1444.json").write_text(json.dumps(dict(settings=dict(
        none=dict(acc=0.8, answer_loss=1.0, short_loss=2.0),
        full_constrained=dict(acc=0.1, answer_loss=4.0, short_loss=2.5),
        efficient_constrained=dict(acc=0.7, answer_loss=1.2, short_loss=2.4)))))
    (out / "ablate-k2-zero-step1444.json").write_text(json.dumps(dict(
        heads=[[1, 0], [3, 2]], acc=dict(none=0.8, top=0.2, control=0.75),
        drop=dict(top=0.6, control=0.05))))
    (out / "probe-C8-step1444.json").write_text(json.dumps(dict(
        accuracy=[0.13, 0.6, 0.62, 0.9], letters=path.name[:2].replace("SF", "SF") * 2)))
  load_runner("full_attention_carries_retrieval").main(["--root", str(tmp_path), "--no-train",
                                                       "--out", str(tmp_path / "out")])
  report = (tmp_path / "out" / "REPORT.md").read_text()
  assert report.count("retrieval lives in the full layers") == 2
  assert "Zeroing the top-2 heads costs 0.60, 2 random heads 0.05 (larger for every seed)" in report
  assert "| 0.9 ± 0 [0.9, 0.9] |" in report        # the probe's last layer
  reproduced = report.split("## What did not")[0]
  assert reproduced.count("enters the residual stream through a full-attention layer") == 2
  assert reproduced.count("a few retrieval heads carry it") == 2


def test_scaling_report(tmp_path):
  sweep = load_sweep(EXPERIMENTS / "scaling" / "sweep.py")
  for i, r in enumerate(plan(sweep)):
    m, cfg = r.resolved.model, r.resolved
    n, steps = cfg.derived.non_embedding_params, cfg.derived.steps
    final = 40 * n ** -0.3 + 300 * cfg.derived.tokens ** -0.3     # a known L(N, D)
    curve = [(s, a, final + 0.5 * (1 - s / steps)) for s, a, _ in
             _sigmoid_curve(steps, {"F": 0.2, "SF": 0.3 + m.window / 64, "LF": 0.5}[m.pattern] * steps)]
    fake_run(tmp_path, f"run{i}", pattern=m.pattern, window=m.window, size=m.size, seed=cfg.train.seed,
             budget=cfg.train.tokens_per_param, n=n, curve=curve)
  runner = load_runner("scaling")
  runner.FIT_STARTS = 12           # a rougher multi-start search keeps the test short
  runner.main(["--root", str(tmp_path), "--no-train", "--out", str(tmp_path / "out")])
  report = (tmp_path / "out" / "REPORT.md").read_text()
  for png in ("emergence.png", "scaling_fit.png"):
    assert (tmp_path / "out" / png).stat().st_size > 10_000
  fit_rows = [line for line in report.splitlines() if line.startswith("| ") and "%" in line]
  assert len(fit_rows) == 5
  for row in fit_rows:     # the fitted law reproduces the fitted sizes and predicts the held-out
    cells = [c.strip() for c in row.strip("|").split("|")]   # one (exponent recovery: test_scaling_fit)
    assert float(cells[3]) > 0.99
    assert float(cells[6].rstrip("%")) < 2.0
  assert "the curves converge with more training" in report
  assert "No architecture at" not in report          # every fake size retrieves
  assert "the design changes how fast long-context ability emerges" in report.split("## What did not")[0]


def test_laziness_report_counts_a_window_that_never_emerges_as_the_slowest(tmp_path):
  _main_runs(tmp_path, {"F": 300, "SF w=4": 300, "SF w=16": 500, "SF w=32": 9000})
  tokens = np.arange(1, 15) * 100 * 4096
  for path in tmp_path.iterdir():
    if path.name.startswith("SF"):
      _trace(path, tokens, np.linspace(0.1, 0.8, tokens.size),
             top_heads=((0, 0), (3, 1)) if path.name.startswith("SF_w32") else ((1, 0), (3, 1)))
  load_runner("large_window_laziness").main(["--root", str(tmp_path), "--no-train",
                                            "--out", str(tmp_path / "out")])
  report = (tmp_path / "out" / "REPORT.md").read_text()
  assert "/ never tokens (median over seeds" in report
  assert "top-4 retrieval heads that sit in full-attention layers is 1.00 / 1.00 / 0.50" in report
  assert "the largest window is the slowest, and every large-window seed is slower" in report
  did_not = report.split("## What did not")[1]
  assert "have not converged within the 30 N budget" in did_not


def test_all_findings_sweep_is_the_union_of_the_findings_grids_shared_runs_first():
  union = [r.name for r in plan(load_sweep(EXPERIMENTS / "all_findings.py"))]
  assert len(union) == len(set(union))
  assert set(union) == {r.name for f in FINDINGS for r in planned(f)}
  shared = {r.name for f in FINDINGS[1:] for r in planned(f)}
  assert set(union[:len(shared)]) == shared      # the three-seed runs come first
  seeds = [int(name.rsplit("seed=", 1)[1]) for name in union[:len(shared)]]
  assert seeds == sorted(seeds)                  # seed by seed


def test_runners_run_as_files_and_as_modules_without_touching_sys_path():
  """``python experiments/<finding>/run.py`` and ``python -m experiments.<finding>.run``: the
  package is importable (pip install -e . installs it; here PYTHONPATH stands in for that)."""
  import ast
  import os
  import subprocess
  import sys
  root = EXPERIMENTS.parent
  for path in EXPERIMENTS.rglob("*.py"):
    for node in ast.walk(ast.parse(path.read_text())):
      assert not (isinstance(node, ast.Attribute) and node.attr == "path"
                  and isinstance(node.value, ast.Name) and node.value.id == "sys"), path
  env = dict(os.environ, PYTHONPATH=str(root))
  for finding in FINDINGS:
    for argv in ([str(EXPERIMENTS / finding / "run.py")], ["-m", f"experiments.{finding}.run"]):
      out = subprocess.run([sys.executable, *argv, "--help"], cwd=root, env=env,
                           capture_output=True, text=True)
      assert out.returncode == 0 and "--no-train" in out.stdout, out.stderr[-500:]


def test_the_library_holds_no_experiment_code():
  package = EXPERIMENTS.parent / "hybrid_jax"
  assert not (package / "analysis" / "study.py").exists()
  assert not (package / "configs" / "toy_study.py").exists()
  for path in package.rglob("*.py"):
    assert "experiments" not in {n.split(".")[0] for n in imported_modules(path)}, path


