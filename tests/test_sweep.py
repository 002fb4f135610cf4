"""The sweep launcher: grids, one-line errors before anything runs, the local backend,
idempotent resubmission, failures reported per run, and kill-then-resubmit."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hybrid_jax.launch import grid, report
from hybrid_jax.launch.grid import SweepError, axis, product, zip_axes

TINY_BASE = """
from hybrid_jax.configs.base import base_config
from hybrid_jax.launch.grid import Sweep, axis, product

def tiny():
  c = base_config()
  c.model.size = "custom"
  c.model.d_model, c.model.n_layers, c.model.n_heads, c.model.n_kv_heads = 32, 2, 4, 2
  c.model.window = 8
  c.data.seq_len = 48
  c.data.n_pairs = 4
  c.train.batch_size = 4
  c.train.steps = {steps}
  c.train.warmup_steps = 2
  c.train.log_every = 2
  c.checkpoint.every = 4
  return c
"""


def write_sweep(tmp_path, grid_src, steps=12, name="sweep.py"):
  path = tmp_path / name
  path.write_text(TINY_BASE.format(steps=steps) + textwrap.dedent(grid_src))
  return path


def _backend_log(line: str) -> bool:
  """Lines XLA's C++ logging prints on start-up (e.g. a CUDA plugin without a GPU)."""
  return line.startswith(("WARNING: All log messages before absl", "I0000 ", "W0000 ", "E0000 "))


def cli(*args, timeout=600, env=None):
  r = subprocess.run([sys.executable, "-m", "hybrid_jax.cli", *args], capture_output=True,
                     text=True, timeout=timeout, env=env)
  r.stderr = "".join(l for l in r.stderr.splitlines(keepends=True) if not _backend_log(l))
  return r


def test_product_zip_and_stable_names():
  g = product(axis("model.pattern", ["F", "SF"]),
              zip_axes(axis("model.window", [8, 16]), axis("train.seed", [0, 1])))
  assert g == [{"model.pattern": "F", "model.window": 8, "train.seed": 0},
               {"model.pattern": "F", "model.window": 16, "train.seed": 1},
               {"model.pattern": "SF", "model.window": 8, "train.seed": 0},
               {"model.pattern": "SF", "model.window": 16, "train.seed": 1}]
  keys = ["model.pattern", "model.window", "train.seed"]
  assert [grid.run_name(p, keys) for p in g][:2] == ["pattern=F,window=8,seed=0",
                                                     "pattern=F,window=16,seed=1"]
  # an ambiguous leaf keeps its full key
  assert grid.run_name({"model.seed": 1, "train.seed": 2}, ["model.seed", "train.seed"]) == \
      "model.seed=1,train.seed=2"
  with pytest.raises(SweepError, match="different lengths"):
    zip_axes(axis("a", [1, 2]), axis("b", [1]))


@pytest.mark.parametrize("src,message", [
    ("def get_sweep(:\n", "syntax error"),
    ("def get_sweep():\n  return Sweep(base=tiny(), grid=[])\n", "grid is empty"),
    ("def get_sweep():\n  return Sweep(base=tiny(), grid=axis('model.windw', [4]))\n",
     "config.model.windw: unknown key"),
    ("def get_sweep():\n  return tiny()\n", "must return"),
])
def test_bad_sweep_files_fail_in_one_line_before_anything_is_written(tmp_path, src, message):
  sweep = write_sweep(tmp_path, src)
  root = tmp_path / "root"
  r = cli("sweep", "submit", str(sweep), "--root", str(root))
  assert r.returncode == 2
  err = r.stderr.strip()
  assert len(err.splitlines()) == 1 and message in err, err
  assert not root.exists()


def test_dry_run_prints_the_grid_and_writes_nothing(tmp_path):
  sweep = write_sweep(tmp_path, """
      def get_sweep():
        return Sweep(base=tiny(), grid=product(axis("model.pattern", ["F", "SF"]),
                                               axis("model.window", [4, 8])))
      """)
  r = cli("sweep", "submit", str(sweep), "--root", str(tmp_path / "root"), "--dry-run",
          "--config.train.steps=7")
  assert r.returncode == 0, r.stderr
  lines = r.stdout.strip().splitlines()
  assert len(lines) == 6 and "pattern=SF,window=8" in r.stdout
  row = next(l for l in lines if l.startswith("pattern=F,window=4")).split()
  assert row[5] == "7"                      # the override reached every run
  assert "4 runs" in lines[-1] and "FLOPs" in lines[-1]
  assert not (tmp_path / "root").exists()


def losses(run_dir):
  return [(r["step"], r["loss"]) for r in report.RunDir(run_dir).read_metrics()]


def test_local_sweep_runs_all_skips_done_and_reports_failures(tmp_path):
  sweep = write_sweep(tmp_path, """
      def get_sweep():
        return Sweep(base=tiny(), grid=axis("train.lr", [3e-3, 1e-2, 1e12]) +
                     axis("model.n_heads", [3]))
      """)
  root = tmp_path / "root"
  r = cli("sweep", "submit", str(sweep), "--root", str(root), "--parallel", "2")
  assert r.returncode == 1, r.stdout + r.stderr        # two runs failed, two finished
  status = {p.name: json.loads((p / "status.json").read_text()) for p in root.iterdir()
            if (p / "status.json").exists()}
  assert status["lr=0.003"]["state"] == status["lr=0.01"]["state"] == "done"
  assert status["lr=1e+12"]["state"] == "failed" and "loss is nan" in status["lr=1e+12"]["error"]
  assert status["n_heads=3"]["state"] == "failed"
  assert "config.model.n_heads: must divide model.d_model" in status["n_heads=3"]["error"]
  assert not (root / "n_heads=3" / "config.json").exists()
  table = cli("sweep", "status", str(root)).stdout
  assert "loss is nan" in table and "must divide" in table and "2 done, 2 failed" in table
  before = losses(root / "lr=0.003")
  mtime = (root / "lr=0.003" / "metrics.jsonl").stat().st_mtime
  again = cli("sweep", "submit", str(sweep), "--root", str(root))
  assert again.returncode == 1 and again.stdout.count("skipped") == 3, again.stdout
  assert losses(root / "lr=0.003") == before
  assert (root / "lr=0.003" / "metrics.jsonl").stat().st_mtime == mtime
  out = tmp_path / "all.tsv"
  assert cli("sweep", "collect", str(root), "--out", str(out)).returncode == 0
  header, *rows = out.read_text().splitlines()
  cols = header.split("\t")
  assert {"run", "n", "tokens", "token_multiplier", "train_loss"} <= set(cols)
  assert len(rows) == 2 * 6 + len(losses(root / "lr=1e+12"))   # logged every 2 of 12 steps


def latest_checkpoint(run_dir) -> int:
  ck = Path(run_dir) / "checkpoints"
  return max([int(p.name) for p in ck.iterdir() if p.name.isdigit()] or [0]) if ck.exists() else 0


def two_seeds_and_their_reference(tmp_path, steps):
  """(sweep file of two seeds, their uninterrupted runs' root, an empty root to test in)."""
  sweep = write_sweep(tmp_path, """
      def get_sweep():
        return Sweep(base=tiny(), grid=axis("train.seed", [0, 1]))
      """, steps=steps)
  reference = tmp_path / "reference"      # (fewer checkpoints: they change no loss)
  assert cli("sweep", "submit", str(sweep), "--root", str(reference),
             f"--config.checkpoint.every={steps}").returncode == 0
  return sweep, reference, tmp_path / "root"


def test_kill_launcher_then_resubmit_equals_uninterrupted(tmp_path):
  # 240 steps: ~3 s of steps and checkpoints after step 8, for the kill to land mid-run
  sweep, reference, root = two_seeds_and_their_reference(tmp_path, steps=240)
  launcher = subprocess.Popen([sys.executable, "-m", "hybrid_jax.cli", "sweep", "submit",
                               str(sweep), "--root", str(root), "--parallel", "2"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 300
  while time.time() < deadline:   # kill once both runs have a checkpoint past step 4
    steps = [latest_checkpoint(root / n) for n in ("seed=0", "seed=1")]
    if min(steps) >= 8:
      break
    time.sleep(0.2)
  os.kill(launcher.pid, signal.SIGKILL)
  launcher.wait()
  time.sleep(1)
  states = [json.loads((root / n / "status.json").read_text())["state"] for n in ("seed=0", "seed=1")]
  assert "done" not in states or states.count("done") < 2, "killed too late to test anything"
  r = cli("sweep", "submit", str(sweep), "--root", str(root))
  assert r.returncode == 0, r.stdout + r.stderr
  for n in ("seed=0", "seed=1"):
    assert json.loads((root / n / "status.json").read_text())["state"] == "done"
    assert losses(root / n) == losses(reference / n)
    log = (root / n / "train.log").read_text()
    if states[("seed=0", "seed=1").index(n)] != "done":
      assert "resuming" in log and "from step 0/" not in log      # never from scratch


SWEEPS = sorted((Path(__file__).parent.parent / "sweeps").glob("*.py"))


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_every_shipped_sweep_file_plans(path):
  """Each grid point of every sweep file validates (dry-run level: nothing is trained)."""
  runs = grid.plan(grid.load_sweep(path))
  assert runs and len({r.name for r in runs}) == len(runs)
  assert not [(r.name, r.error) for r in runs if r.error]


def test_status_of_a_running_run_shows_its_latest_logged_step(tmp_path):
  """status.json is written when a run starts and ends; while it runs, the table's step
  comes from metrics.jsonl, so it agrees with the tokens column."""
  from hybrid_jax.run import RunDir
  for name, state in (("a", "running"), ("b", "preempted")):
    run = RunDir(tmp_path / name)
    run.path.mkdir()
    (run.path / "launch.json").write_text("{}")
    run.write_status(state, 0 if state == "running" else 40, 100)
    for step in (50, 60):
      run.append_metrics(dict(step=step, tokens=step * 10, loss=1.0))
  rows = {r["run"]: r for r in report.status_rows(tmp_path)}
  assert (rows["a"]["step"], rows["a"]["tokens"]) == (60, 600)
  assert rows["b"]["step"] == 40          # a stopped run shows its checkpointed step


def test_status_counts_the_unreadable_records_it_skipped_as_collect_does(tmp_path, capsys):
  from hybrid_jax import cli as hybrid_jax_cli
  from hybrid_jax.run import RunDir, collect_rows
  run = RunDir(tmp_path / "run")
  run.path.mkdir()
  run.config_path.write_text(json.dumps(dict(
      derived=dict(non_embedding_params=100), train=dict(seed=0),
      model=dict(size="toy-xs", pattern="SF", window=8, pos_full="rope"))))
  run.write_status("done", 2, 2)
  run.append_metrics(dict(step=2, tokens=20, loss=2.0))
  run.append_eval(dict(step=2, tokens=20, settings_id="s", retrieval_acc=0.5))
  with open(run.eval_path, "ab") as f:
    f.write(b"\x00\xff binary\n" + json.dumps(dict(step="three", tokens=30)).encode() + b"\n")
  run.append_eval(dict(step=4, tokens=40, settings_id="s", retrieval_acc=0.75))
  assert hybrid_jax_cli.main(["sweep", "status", str(tmp_path)]) == 0
  out = capsys.readouterr().out.strip().splitlines()
  assert out[-1] == "1 done; 2 unreadable records skipped (metrics.jsonl, eval.jsonl)", out
  assert collect_rows(tmp_path, with_skipped=True)[1] == 2
  assert report.status_rows(tmp_path)[0]["long_score"] == 0.75


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and two cores")
def test_parallel_local_workers_each_get_a_core_of_their_own():
  """XLA:CPU sizes its thread pool by the process's CPU affinity; the XLA flags alone left two
  busy pool threads in every worker, so two workers fought over both cores."""
  from hybrid_jax.launch import local
  cpus = local.worker_cpus(2)
  assert len(set(cpus)) == 2 and set(cpus) <= os.sched_getaffinity(0)
  assert local.worker_cpus(1) is None
  assert local.worker_cpus(len(os.sched_getaffinity(0)) + 1) is None   # more workers than cores
  seen = []
  for cpu in cpus:
    out = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                         capture_output=True, text=True, check=True, preexec_fn=local.start_on(cpu))
    seen.append(json.loads(out.stdout))
  assert seen == [[cpus[0]], [cpus[1]]]
