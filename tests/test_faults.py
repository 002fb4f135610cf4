"""Faults a user meets (issue: fall back, lose no record, help, one line): each one here
fails in one clear line or is recovered from, and never loses a record or a checkpoint."""

import errno
import json
import os

import pytest
from conftest import tiny_config

from hybrid_jax import cli
from hybrid_jax.train.checkpoint import Checkpointer
from hybrid_jax.train.failures import DiskError, NonFiniteLoss
from hybrid_jax.training import train
from hybrid_jax.run import RunDir


def _backend_log(line: str) -> bool:
  """Lines XLA's C++ logging prints on start-up (e.g. a CUDA plugin without a GPU)."""
  return line.startswith(("WARNING: All log messages before absl", "I0000 ", "W0000 ", "E0000 "))


def _corrupt(step_dir):
  for f in step_dir.rglob("*"):
    if f.is_file() and f.stat().st_size > 0:
      f.write_bytes(b"garbage")


def _metrics(run):
  return [(r["step"], r["loss"], r["grad_norm"]) for r in RunDir(run).read_metrics()]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  run = tmp_path_factory.mktemp("ref") / "run"
  train(tiny_config(steps=8), run, progress=False)
  return run


def test_a_corrupt_latest_checkpoint_resumes_from_the_previous_one_bit_exactly(tmp_path, reference, capsys):
  c = tiny_config(steps=8)
  run = tmp_path / "run"
  train(c, run, progress=False)
  _corrupt(run / "checkpoints" / "8")
  lines = (run / "metrics.jsonl").read_text().splitlines()
  lines.insert(2, "#### garbage in the middle ####")          # kept across the rewrite
  (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
  capsys.readouterr()
  assert train(c, run, progress=False)["state"] == "done"
  lines = [l for l in capsys.readouterr().err.splitlines() if not _backend_log(l)]
  assert all(l.startswith("hybrid-jax: ") for l in lines), lines          # no orbax/absl pages
  err = [l for l in lines if "checkpoint 8" in l]
  assert len(err) == 1 and "cannot be restored" in err[0] and "trying the previous one" in err[0]
  assert (run / "checkpoints" / "corrupt" / "8").is_dir()                 # set aside, not deleted
  assert _metrics(run) == _metrics(reference)                             # bit-exact, no duplicates
  assert "#### garbage in the middle ####" in (run / "metrics.jsonl").read_text()


def test_a_run_resumed_on_another_core_count_says_it_continues_within_rounding(tmp_path, capsys):
  """XLA:CPU splits work over the cores a process may use: the trainer keeps its setup in
  status.json, and a resume on another setup says so (on the same setup it says nothing)."""
  c = tiny_config(steps=8)
  run = tmp_path / "run"
  train(c, run, progress=False)
  setup = RunDir(run).read_status()["setup"]
  assert setup.startswith("cpu x") and setup.endswith(f"{len(os.sched_getaffinity(0))} cores")

  def resume_from_4(recorded):
    _corrupt(run / "checkpoints" / "8")
    status = RunDir(run).read_status()
    status["setup"] = recorded
    (run / "status.json").write_text(json.dumps(status))
    capsys.readouterr()
    assert train(c, run, progress=False)["state"] == "done"
    return [l for l in capsys.readouterr().err.splitlines() if "within rounding" in l]

  assert resume_from_4(setup) == []
  assert resume_from_4("cpu x1, 64 cores") == [
      f"hybrid-jax: warning: resuming on {setup} where the run trained on cpu x1, 64 cores; the "
      "losses continue within rounding, not bit for bit (XLA splits work by the setup)"]
  assert RunDir(run).read_status()["setup"] == setup


def test_a_mid_file_garbage_line_warns_with_file_and_line_and_keeps_the_rest(tmp_path, capsys):
  run = RunDir(tmp_path)
  for step in (1, 2, 3):
    run.append_metrics(dict(step=step, tokens=step * 10, loss=1.0))
  text = run.metrics_path.read_text().splitlines()
  run.metrics_path.write_bytes(("\n".join([text[0], "{not json", text[1], '{"step": "x", "tokens": 1, '
                                           '"loss": 1}', text[2]]) + "\n{\"step\": 4").encode()
                               + b"\n\xff\xfe binary\n" + b'{"step": 5, "tok')   # torn last line
  assert [r["step"] for r in run.read_metrics()] == [1, 2, 3]
  err = capsys.readouterr().err.splitlines()
  assert [e.split(": record skipped")[0] for e in err] == [
      f"hybrid-jax: warning: {run.metrics_path}:{n}" for n in (2, 4, 6, 7)]
  assert run.skipped == 4
  run.truncate_metrics(2)              # a resume keeps every line it could not parse
  kept = run.metrics_path.read_bytes()
  assert b"{not json" in kept and b"\xff\xfe binary" in kept and b'"step": 5' not in kept
  assert [r["step"] for r in run.read_metrics()] == [1, 2]


def test_a_deleted_metrics_file_is_reported_at_resume(tmp_path, capsys):
  c = tiny_config(steps=4)
  train(c, tmp_path / "run", progress=False)
  (tmp_path / "run" / "metrics.jsonl").unlink()
  capsys.readouterr()
  train(c, tmp_path / "run", progress=False)
  assert "metrics.jsonl is missing; the records of steps 1-4 are lost" in capsys.readouterr().err


def test_a_nan_run_fails_in_one_line_naming_the_last_finite_loss_and_the_lr(tmp_path, capsys):
  c = tiny_config(steps=6)
  c.train.lr = 1e12
  with pytest.raises(NonFiniteLoss, match=r"loss is nan at step \d+ \(last finite loss .* at step \d+\)"
                                          r".*config.train.lr \(now 1e\+12\)"):
    train(c, tmp_path / "run", progress=False)
  status = RunDir(tmp_path / "run").read_status()
  assert status["state"] == "failed" and status["error"].startswith("loss is nan")


def test_a_full_disk_fails_in_one_line_and_keeps_the_earlier_checkpoints(tmp_path, monkeypatch):
  c = tiny_config(steps=8)
  save, saved = Checkpointer.save, []

  def full_disk_from_step_4(self, step, state, force=False):
    if step >= 4:
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if save(self, step, state, force):
      saved.append(str(step))

  monkeypatch.setattr(Checkpointer, "save", full_disk_from_step_4)
  with pytest.raises(DiskError) as e:
    train(c, tmp_path / "run", progress=False)
  assert "\n" not in str(e.value) and "No space left on device" in str(e.value)
  assert e.value.__traceback__ is not None and e.value.__cause__ is None
  assert saved and sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == saved
  assert RunDir(tmp_path / "run").read_status()["state"] == "failed"
  monkeypatch.setattr(Checkpointer, "save", save)        # space freed: the rerun resumes
  assert train(c, tmp_path / "run", progress=False)["state"] == "done"


@pytest.mark.parametrize("value", ["nan", "inf", "-1.0", "0.0"])
def test_non_finite_or_non_positive_lr_is_rejected_before_anything(tmp_path, value, capsys):
  code = cli.main(["train", "--workdir", str(tmp_path / "run"), f"--config.train.lr={value}"])
  err = [l for l in capsys.readouterr().err.splitlines() if l.startswith("hybrid-jax")]
  assert code == 2 and err == [f"hybrid-jax: error: config.train.lr: must be a finite number > 0 "
                               f"(got {float(value)})"] and not (tmp_path / "run").exists()


def test_eval_of_a_failed_run_is_refused_unless_forced(tmp_path, capsys):
  run = RunDir(tmp_path / "run")
  train(tiny_config(steps=2), run.path, progress=False)
  run.write_status("failed", 2, 2, "loss is nan at step 2")
  code = cli.main(["eval", "--workdir", str(run.path), "--config.eval.examples=1"])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 2 and len(err) == 1 and "failed at step 2" in err[0] and "--force" in err[0]
  assert not run.eval_path.exists()


HELP = [[], ["train"], ["eval"], ["sweep"], ["sweep", "submit"], ["sweep", "status"],
        ["sweep", "collect"], ["plot"], ["plot", "emergence"], ["plot", "scaling"], ["fit-scaling"],
        ["data"], ["data", "build"], ["data", "tokenizer"], ["data", "show"], ["analyze"],
        *[["analyze", s] for s in ("heads", "trace", "constrain", "ablate", "probe", "gradient")]]


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("words", HELP, ids=lambda w: " ".join(w) or "top")
def test_help_works_on_every_command_and_shows_defaults(words, flag, capsys):
  with pytest.raises(SystemExit) as e:          # argparse exits 0 after help; ours return 0
    raise SystemExit(cli.main([*words, flag]))
  out = capsys.readouterr().out
  assert e.value.code == 0 and out.startswith("usage: hybrid-jax"), out[:200]
  description = out.split("\n\n")[1].strip()
  assert description[0].isupper() and description.rstrip(")").endswith("."), description
  if words and words[-1] not in ("sweep", "plot", "data", "analyze", "status"):
    assert "default" in out


def test_train_help_lists_the_config_keys_with_their_defaults(capsys):
  assert cli.main(["train", "--help"]) == 0
  out = capsys.readouterr().out
  assert "  train.lr = " in out and "--workdir" in out and "--quiet" in out


def test_the_toy_windows_sweep_evaluates_a_task_its_runs_can_learn():
  from pathlib import Path

  from hybrid_jax.data import synthetic_tasks
  from hybrid_jax.launch import grid
  sweep = grid.load_sweep(Path(__file__).parents[1] / "sweeps" / "toy_windows.py")
  for run in grid.plan(sweep, {}):
    assert not run.error, run.error
    cfg = run.resolved
    tasks = set(cfg.eval.tasks.split(","))
    assert cfg.data.name == "synthetic" and tasks <= set(synthetic_tasks.TASK_NAMES), (run.name, tasks)


def _run_dir(root, name):
  run = RunDir(root / name)
  run.path.mkdir(parents=True)
  (run.path / "launch.json").write_text("{}")
  return run


def test_sweep_status_shows_started_runs_as_running_and_dead_trainers_as_stale(tmp_path):
  import subprocess
  import sys

  from hybrid_jax.launch import report
  starting = _run_dir(tmp_path, "starting")
  child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  try:
    starting.mark_started(child.pid)                      # what the local launcher does
    training = _run_dir(tmp_path, "training")
    training.lock()                                      # a live trainer holds the lock
    training.write_status("running", 30, 100)
    dead = _run_dir(tmp_path, "dead")
    dead.write_status("running", 20, 100)                # SIGKILLed: nobody holds its lock
    remote = _run_dir(tmp_path, "remote")                # on another node: its lock is not ours
    remote.status_path.write_text(json.dumps(dict(state="running", step=5, host="node-elsewhere")))
    rows = {r["run"]: r for r in report.status_rows(tmp_path)}
    assert rows["starting"]["state"] == "running"
    assert (rows["training"]["state"], rows["training"]["step"]) == ("running", 30)
    assert rows["dead"]["state"] == "stale" and "trainer died" in rows["dead"]["error"]
    assert rows["remote"]["state"] == "running"
  finally:
    child.kill()
    child.wait()
    training.unlock()
  assert {r["run"]: r["state"] for r in report.status_rows(tmp_path)}["starting"] == "stale"


def test_bad_records_never_crash_status_or_collect_and_collect_counts_them(tmp_path, capsys):
  from hybrid_jax.launch import report
  run = _run_dir(tmp_path, "run")
  run.config_path.write_text(json.dumps(dict(
      derived=dict(non_embedding_params=100), train=dict(seed=0),
      model=dict(size="toy-xs", pattern="SF", window=8, pos_full="rope"))))
  run.append_metrics(dict(step=1, tokens=10, loss=2.0))
  run.append_eval(dict(step=1, tokens=10, settings_id="s", retrieval_acc=0.5))
  with open(run.eval_path, "ab") as f:
    f.write(b"\x00\xff binary\n")
    f.write(json.dumps(dict(step="two", tokens=20, settings_id="s")).encode() + b"\n")
    f.write(json.dumps(dict(step=3, tokens=30, settings_id="s", retrieval_acc="high")).encode() + b"\n")
  run.append_eval(dict(step=4, tokens=40, settings_id="s", retrieval_acc=0.75))
  assert report.status_rows(tmp_path)[0]["long_score"] == 0.75
  from hybrid_jax.run import collect_rows
  rows, skipped = collect_rows(tmp_path, with_skipped=True)
  assert [r["step"] for r in rows] == [1, 4] and skipped == 3
  assert cli.main(["sweep", "collect", str(tmp_path)]) == 0
  assert "3 unreadable records skipped" in capsys.readouterr().out


def test_collect_on_an_empty_root_is_an_error(tmp_path, capsys):
  assert cli.main(["sweep", "collect", str(tmp_path)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "nothing to collect" in err[0] and not list(tmp_path.iterdir())


def test_a_rule_broken_at_every_grid_point_is_one_line_before_anything_is_created(tmp_path, capsys):
  sweep = tmp_path / "sweep.py"
  sweep.write_text("from hybrid_jax.configs.default import get_config\n"
                   "from hybrid_jax.launch.grid import Sweep, axis\n"
                   "def get_sweep():\n"
                   "  return Sweep(base=get_config(), grid=axis('model.n_heads', [3, 5]))\n")
  assert cli.main(["sweep", "submit", str(sweep), "--root", str(tmp_path / "root")]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("hybrid-jax: error: every grid point is invalid (2 of 2)")
  assert not (tmp_path / "root").exists()


def test_data_build_skips_binary_text_files_with_a_count(tmp_path, capsys):
  import numpy as np

  from hybrid_jax.data import corpus as C
  from hybrid_jax.data.text import generated_sentences
  src = tmp_path / "src"
  src.mkdir()
  rng = np.random.default_rng(0)
  for i in range(20):
    (src / f"doc{i}.txt").write_text("".join(generated_sentences(rng, 400)))
  (src / "noise.txt").write_bytes(np.random.default_rng(1).bytes(4000))
  assert cli.main(["data", "build", "--source", str(src), "--out", str(tmp_path / "out"),
                   "--validation-fraction", "0.3"]) == 0
  assert "skipped 1 .txt/.md files that are not UTF-8 text" in capsys.readouterr().out
  ids = {C.open_corpus(tmp_path / "out", s).id(i) for s in C.SPLITS
         for i in range(len(C.open_corpus(tmp_path / "out", s)))}
  assert "noise.txt" not in ids and len(ids) == 20
  binary = tmp_path / "binary"
  binary.mkdir()
  (binary / "a.txt").write_bytes(b"\x00\x01\x02" * 100)
  (binary / "b.bin").write_bytes(b"\xff" * 100)
  assert cli.main(["data", "build", "--source", str(binary), "--out", str(tmp_path / "o2")]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "1 .txt/.md files are not UTF-8 text, 1 files have other suffixes" in err[0]
