"""Training: determinism, exact resume after SIGKILL / SIGTERM, the run-dir contract,
and refusal to mix runs or touch results on bad input."""

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from conftest import tiny_config, tiny_config_file
from hybrid_jax.train.checkpoint import log_spaced_steps
from hybrid_jax.standard_run import train
from hybrid_jax.run import RunDir, RunDirError

STEPS = 48
CONFIG_FILE = tiny_config_file(STEPS, "c.checkpoint.every = 4")
KEYS = ("step", "tokens", "loss", "lr", "grad_norm", "answer_loss", "answer_acc")


def _curve(workdir):
  return [{k: r[k] for k in KEYS} for r in RunDir(workdir).read_metrics()]


def _backend_log(line: str) -> bool:
  """Lines XLA's C++ logging prints on start-up (e.g. a CUDA plugin without a GPU)."""
  return line.startswith(("WARNING: All log messages before absl", "I0000 ", "W0000 ", "E0000 "))


def _cli(workdir, config_file, *extra):
  return [sys.executable, "-m", "hybrid_jax.cli", "train", "--config", str(config_file),
          "--workdir", str(workdir), *extra]


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, config_file):
  """An uninterrupted run through the CLI, the baseline resumed runs must equal."""
  workdir = tmp_path_factory.mktemp("ref") / "run"
  subprocess.run(_cli(workdir, config_file), check=True, capture_output=True)
  return workdir


def test_run_directory_contract(reference_run):
  run = RunDir(reference_run)
  assert json.loads(run.config_path.read_text())["model"]["window"] == 8
  status = run.read_status()
  assert (status["state"], status["step"], status["total_steps"]) == ("done", STEPS, STEPS)
  records = run.read_metrics()
  assert [r["step"] for r in records] == list(range(1, STEPS + 1))
  assert all({"step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s"} <= set(r) for r in records)
  assert records[-1]["loss"] < records[0]["loss"]
  kept = sorted(int(p.name) for p in run.checkpoint_dir.iterdir() if p.name.isdigit())
  assert kept == sorted(set(log_spaced_steps(STEPS, 2)) | {STEPS})
  assert any(p.name.startswith("events.out.tfevents") for p in run.tensorboard_dir.iterdir())
  assert (reference_run / "curves.png").stat().st_size > 1000


def test_the_tensorboard_writer_leaves_torch_unimported(tmp_path):
  """tensorboardX imports torch when installed (seconds of every run's start); ours does not,
  and torch stays importable afterwards."""
  code = ("import sys; from hybrid_jax.train.loop import _summary_writer\n"
          f"w = _summary_writer({str(tmp_path)!r}, None); w.add_scalar('train/loss', 1.5, 3); w.close()\n"
          "import importlib.util; print('torch' in sys.modules, importlib.util.find_spec('torch') is not None)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  installed = importlib.util.find_spec("torch") is not None
  assert out.stdout.split() == ["False", str(installed)], out.stdout + out.stderr
  assert [p for p in tmp_path.iterdir() if p.name.startswith("events.out.tfevents")]


@pytest.mark.skipif(importlib.util.find_spec("IPython") is None, reason="IPython is not installed")
@pytest.mark.parametrize("ipython_running", [False, True])
def test_a_training_process_imports_ipython_only_where_it_runs(ipython_running):
  """flax imports IPython (0.3 s of a training process's start, idle host) only to ask whether it
  is running: the project's import of flax (hybrid_jax.flax_nnx) skips that where it is not,
  IPython stays importable afterwards, and inside a running IPython flax sees it as before."""
  start = ("from IPython.testing.globalipapp import start_ipython; start_ipython()\n"
           if ipython_running else "")
  code = (f"import sys\n{start}import hybrid_jax.model\n"
          "from flax.nnx import summary\n"
          "print('IPython' in sys.modules, summary.in_ipython)\n"
          "import IPython; print(IPython.get_ipython() is not None)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.split() == [str(ipython_running)] * 3, out.stdout + out.stderr


def test_log_spaced_steps_are_dense_early():
  steps = log_spaced_steps(1000, 2)
  assert steps[:6] == [1, 2, 3, 4, 6, 8] and steps[-1] <= 1000
  gaps = [b - a for a, b in zip(steps, steps[1:])]
  assert gaps == sorted(gaps)
  assert log_spaced_steps(1000, 0) == []


def test_same_seed_gives_same_losses_and_another_seed_does_not(tmp_path):
  c = tiny_config(steps=6)
  train(c, tmp_path / "a", progress=False)
  train(c, tmp_path / "b", progress=False)
  c.train.seed = 1
  train(c, tmp_path / "c", progress=False)
  assert _curve(tmp_path / "a") == _curve(tmp_path / "b")
  assert _curve(tmp_path / "a") != _curve(tmp_path / "c")


def _wait_for_lines(run, n, proc, timeout=120):
  t0 = time.time()
  while time.time() - t0 < timeout and proc.poll() is None:
    if len(run.read_metrics()) >= n:
      return
    time.sleep(0.02)


def test_sigkill_at_a_random_step_then_rerun_equals_uninterrupted(tmp_path, config_file, reference_run):
  workdir = tmp_path / "run"
  run = RunDir(workdir)
  kill_at = random.Random(os.getpid()).randint(6, STEPS - 12)
  proc = subprocess.Popen(_cli(workdir, config_file), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
  _wait_for_lines(run, kill_at, proc)
  proc.kill()
  proc.wait()
  assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
  assert run.read_status()["state"] == "running"
  done_before = len(run.read_metrics())
  assert done_before < STEPS
  subprocess.run(_cli(workdir, config_file), check=True, capture_output=True)
  assert _curve(workdir) == _curve(reference_run)
  assert run.read_status()["state"] == "done"


def test_sigterm_saves_marks_preempted_and_resumes_exactly(tmp_path, config_file, reference_run):
  workdir = tmp_path / "run"
  run = RunDir(workdir)
  proc = subprocess.Popen(_cli(workdir, config_file), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
  _wait_for_lines(run, 9, proc)
  proc.send_signal(signal.SIGTERM)
  proc.wait(timeout=60)
  assert proc.returncode == 143
  status = run.read_status()
  assert status["state"] == "preempted" and status["step"] < STEPS
  kept = [int(p.name) for p in run.checkpoint_dir.iterdir() if p.name.isdigit()]
  assert max(kept) == status["step"]          # nothing since the signal is lost
  subprocess.run(_cli(workdir, config_file), check=True, capture_output=True)
  assert _curve(workdir) == _curve(reference_run)


KILL_MID_SAVE = """
import os, pathlib, signal, sys, time
from hybrid_jax.commands.train import parse_train_flags
from hybrid_jax.train import loop
from hybrid_jax.core.hooks import Hook

class KillMidSave(Hook):
  def checkpoint(self, step):        # the save has begun: the checkpoint thread writes it
    if step == 8:
      saves = pathlib.Path(workdir) / "checkpoints"
      deadline = time.time() + 10    # killed once its temporary directory is on disk
      while time.time() < deadline and not any("8" in p.name for p in saves.iterdir()):
        time.sleep(0.001)
      os.kill(os.getpid(), signal.SIGKILL)

cfg, workdir = parse_train_flags(sys.argv[1:])
loop.train(cfg, workdir, progress=False, hooks=(KillMidSave(),))
"""


def test_sigkill_during_an_async_save_leaves_no_half_checkpoint_and_resumes_exactly(
    tmp_path, config_file, reference_run):
  workdir = tmp_path / "run"
  proc = subprocess.run([sys.executable, "-c", KILL_MID_SAVE, "--config", str(config_file),
                         "--workdir", str(workdir)], capture_output=True)
  assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
  run = RunDir(workdir)
  kept = sorted(int(p.name) for p in run.checkpoint_dir.iterdir() if p.name.isdigit())
  assert kept and kept[-1] <= 8
  assert any("tmp" in p.name for p in run.checkpoint_dir.iterdir()) or kept[-1] == 8
  subprocess.run(_cli(workdir, config_file), check=True, capture_output=True)
  assert _curve(workdir) == _curve(reference_run)
  assert not any("tmp" in p.name for p in run.checkpoint_dir.iterdir())


def test_another_config_in_the_same_workdir_is_refused_untouched(tmp_path):
  c = tiny_config(steps=4)
  train(c, tmp_path / "run", progress=False)
  before = {p: p.read_bytes() for p in (tmp_path / "run").glob("*.json*")}
  c.model.window = 4
  with pytest.raises(RunDirError, match="another config.*model.window: 8 -> 4"):
    train(c, tmp_path / "run", progress=False)
  assert before == {p: p.read_bytes() for p in (tmp_path / "run").glob("*.json*")}


def test_a_finished_run_is_not_trained_again(tmp_path):
  c = tiny_config(steps=4)
  train(c, tmp_path / "run", progress=False)
  metrics = (tmp_path / "run" / "metrics.jsonl").read_bytes()
  assert train(c, tmp_path / "run", progress=False)["state"] == "done"
  assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == metrics


def test_two_trainers_never_share_a_run(tmp_path):
  holder = RunDir(tmp_path / "run")
  holder.lock()
  with pytest.raises(RunDirError, match="in use"):
    train(tiny_config(steps=2), tmp_path / "run", progress=False)


def test_cli_bad_config_fails_in_one_line_before_creating_anything(tmp_path, config_file):
  workdir = tmp_path / "run"
  proc = subprocess.run(_cli(workdir, config_file, "--config.model.n_kv_heads=3"),
                        capture_output=True, text=True)
  assert proc.returncode == 2
  assert [l for l in proc.stderr.splitlines() if not _backend_log(l)] == [
      "hybrid-jax: error: config.model.n_kv_heads: must divide model.n_heads=4 (got 3)"]
  assert not workdir.exists()


def test_a_hybrid_of_every_mixer_trains(tmp_path):
  c = tiny_config(pattern="MGLH", n_layers=4, steps=6)
  c.checkpoint.every, c.checkpoint.log_per_octave = 3, 0
  train(c, tmp_path / "full", progress=False)
  records = _curve(tmp_path / "full")
  assert all(r["loss"] == r["loss"] and r["grad_norm"] > 0 for r in records)
  assert records[-1]["loss"] < records[0]["loss"]


def test_answer_accuracy_counts_answers_whose_target_has_the_top_logit():
  import jax
  import jax.numpy as jnp
  import numpy as np
  from hybrid_jax.train.step import lm_loss
  logits = jax.random.normal(jax.random.PRNGKey(0), (4, 16, 11))
  targets = jax.random.randint(jax.random.PRNGKey(1), (4, 16), 0, 11)
  targets = targets.at[:, ::3].set(jnp.argmax(logits, -1)[:, ::3])      # some hits
  mask = jax.random.bernoulli(jax.random.PRNGKey(2), 0.5, (4, 16))
  _, metrics = lm_loss(logits, targets, mask)
  expected = jnp.sum((jnp.argmax(logits, -1) == targets) & mask) / mask.sum()
  assert 0 < float(expected) < 1
  np.testing.assert_allclose(float(metrics["answer_acc"]), float(expected), rtol=1e-6)


def test_saves_slower_than_the_checkpoint_interval_skip_rolling_saves_not_steps_or_results(tmp_path, monkeypatch, capsys):
  """checkpoint.every=1 with saves slower than a step: the loop does not wait for each save;
  rolling saves due mid-write are skipped and counted, the last step is still saved, and the
  losses are those of a run that saved rarely."""
  from hybrid_jax.train.checkpoint import Checkpointer
  write = Checkpointer._write
  monkeypatch.setattr(Checkpointer, "_write", lambda self, *a: (time.sleep(0.3), write(self, *a)))
  c = tiny_config(steps=10)
  c.checkpoint.every, c.checkpoint.log_per_octave = 1, 0
  train(c, tmp_path / "often", progress=False)
  said = capsys.readouterr().err
  assert "rolling checkpoint(s) skipped" in said and "checkpoint.every=1 " in said, said
  kept = sorted(int(p.name) for p in RunDir(tmp_path / "often").checkpoint_dir.iterdir() if p.name.isdigit())
  assert kept == [10]
  c.checkpoint.every = 1000
  train(c, tmp_path / "rarely", progress=False)
  assert _curve(tmp_path / "often") == _curve(tmp_path / "rarely")
