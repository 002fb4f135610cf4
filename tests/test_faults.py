"""Faults a user meets (issue: fall back, lose no record, help, one line): each one here
fails in one clear line or is recovered from, and never loses a record or a checkpoint."""

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tiny_config

from hybrid_jax import cli
from hybrid_jax.run import RunDir, checkpoint_steps
from hybrid_jax.train.checkpoint import Checkpointer
from hybrid_jax.train.failures import DiskError, NonFiniteLoss, disk_error
from hybrid_jax.standard_run import train

# What orbax 0.12 raises when a checkpoint does not fit (TensorStore's error, not an OSError).
ORBAX_ENOSPC = ('RESOURCE_EXHAUSTED: Error writing "packed.opt_state.float32/0" in OCDBT database at '
                'local file "/r/checkpoints/3.orbax-checkpoint-tmp/default.orbax-checkpoint-tmp/'
                'ocdbt.process_0/": Failed writing: "/r/checkpoints/3.orbax-checkpoint-tmp/d/3d0e": '
                "Failed to write 1951 bytes to file 18: No space left on device [os_error_code='28']")


def _backend_log(line: str) -> bool:
  """Lines XLA's C++ logging prints on start-up (e.g. a CUDA plugin without a GPU)."""
  return line.startswith(("WARNING: All log messages before absl", "I0000 ", "W0000 ", "E0000 "))


def _corrupt(step_dir):
  for f in step_dir.rglob("*"):
    if f.is_file() and f.stat().st_size > 0:
      f.write_bytes(b"garbage")


def _metrics(run):
  return [(r["step"], r["loss"], r["grad_norm"]) for r in RunDir(run).read_metrics()]


def _mount(*args):
  """``mount ARGS``; the test skips, saying why, where this machine does not allow it."""
  if os.geteuid() != 0 or shutil.which("mount") is None:
    pytest.skip("mounting a filesystem needs root and mount(8); the fake-error tests cover this")
  out = subprocess.run(["mount", *args], capture_output=True, text=True)
  if out.returncode:
    pytest.skip(f"mount {' '.join(args)} is not allowed here: {out.stderr.strip()}")


@pytest.fixture
def mounts():
  """Mount points to unmount at teardown, newest first."""
  points = []
  yield points
  for point in reversed(points):
    subprocess.run(["umount", str(point)], capture_output=True)


def _read_only_view(src, dst, mounts):
  """``dst``: ``src`` through a read-only bind mount (root ignores chmod bits: only a
  read-only mount makes a directory unwritable for root)."""
  dst.mkdir()
  _mount("--bind", str(src), str(dst))
  mounts.append(dst)
  _mount("-o", "remount,bind,ro", str(dst))


def _cli(args, tmp_path, steps=8):
  """``python -m hybrid_jax.cli train`` on tiny_config(steps) in a process of its own (what a
  user sees includes what Python prints at exit): (exit code, stderr lines that are ours or
  a traceback's, the backend's start-up logs left out)."""
  config = tmp_path / "tiny_config.py"
  config.write_text(f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                    f"from conftest import tiny_config\n"
                    f"def get_config():\n  return tiny_config(steps={steps})\n")
  out = subprocess.run([sys.executable, "-m", "hybrid_jax.cli", "train", "--config", str(config),
                        "--quiet", *args], capture_output=True, text=True)
  return out.returncode, [l for l in out.stderr.splitlines() if l.strip() and not _backend_log(l)]


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


@pytest.mark.parametrize("error", [
    OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), ValueError(ORBAX_ENOSPC)],
    ids=["oserror", "orbax-valueerror"])
def test_a_full_disk_fails_in_one_line_and_keeps_the_earlier_checkpoints(tmp_path, monkeypatch, error):
  """The fake form of the tmpfs test below, for machines that cannot mount one."""
  c = tiny_config(steps=8)
  save, saved = Checkpointer.save, []

  def full_disk_from_step_4(self, step, state, force=False):
    if step >= 4:
      raise error
    if save(self, step, state, force):
      saved.append(str(step))

  monkeypatch.setattr(Checkpointer, "save", full_disk_from_step_4)
  with pytest.raises(DiskError) as e:
    train(c, tmp_path / "run", progress=False)
  assert "\n" not in str(e.value) and "No space left on device (errno ENOSPC)" in str(e.value)
  assert e.value.__traceback__ is not None and e.value.__cause__ is None
  assert saved and sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == saved
  assert RunDir(tmp_path / "run").read_status()["state"] == "failed"
  monkeypatch.setattr(Checkpointer, "save", save)        # space freed: the rerun resumes
  assert train(c, tmp_path / "run", progress=False)["state"] == "done"


@pytest.mark.parametrize("error, code", [
    (ValueError(ORBAX_ENOSPC), errno.ENOSPC),
    (RuntimeError("save failed"), None),
    (ValueError("PERMISSION_DENIED: Error writing x: Read-only file system [os_error_code=30]"),
     errno.EROFS),
    # a device out of memory is RESOURCE_EXHAUSTED too, but names no errno: not a disk
    (ValueError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1024 bytes."), None)],
    ids=["orbax-enospc", "other", "orbax-erofs", "device-oom"])
def test_disk_errors_are_recognised_in_the_forms_orbax_raises_them(error, code):
  wrapped = RuntimeError("Save Finalize thread failed")
  wrapped.__cause__ = error
  got = disk_error(wrapped, "RUN")
  assert (got is None) if code is None else \
      f"(errno {errno.errorcode[code]})" in str(got) and str(got).startswith("cannot write to RUN: ")


def test_a_checkpoint_that_does_not_fit_a_real_disk_fails_in_one_line_and_resumes_once_freed(
    tmp_path, reference, mounts):
  """A tmpfs that holds two checkpoints of the run, not three: orbax fails inside TensorStore
  (a ValueError) and leaves N.orbax-checkpoint-tmp behind; the run is one line, exit 2,
  marked failed, its checkpoints 1 and 2 intact; the tmp directory is never a checkpoint, and
  with space freed the rerun removes it and resumes from 2, bit-exactly."""
  per_checkpoint = sum(-(-f.stat().st_size // 4096) * 4096
                       for f in (reference / "checkpoints" / "1").rglob("*") if f.is_file())
  disk = tmp_path / "disk"
  disk.mkdir()
  _mount("-t", "tmpfs", "-o", f"size={int(2.5 * per_checkpoint) // 1024}k", "tmpfs", str(disk))
  mounts.append(disk)
  run = disk / "run"
  run.mkdir()
  # TensorBoard's event file lives off the small disk: its writer thread failing on a full
  # disk is the trainer's loop's concern, not the checkpoint's.
  (tmp_path / "tensorboard").mkdir()
  (run / "tensorboard").symlink_to(tmp_path / "tensorboard")

  code, err = _cli(["--workdir", str(run)], tmp_path)
  assert code == 2 and len(err) == 1, err
  assert err[0].startswith(f"hybrid-jax: error: cannot write to {run}: No space left on device "
                           "(errno ENOSPC); earlier checkpoints are intact"), err
  status = RunDir(run).read_status()
  assert status["state"] == "failed" and "No space left on device" in status["error"]
  # The failed save's partial directory is removed as the run fails (the space it took is
  # what the status needs on a full disk); it was never a checkpoint.
  assert not [p.name for p in (run / "checkpoints").iterdir() if "orbax-checkpoint-tmp" in p.name]
  assert checkpoint_steps(run) == [1, 2]
  assert _metrics(run) == _metrics(reference)[:len(_metrics(run))]

  _mount("-o", f"remount,size={8 * per_checkpoint // 1024}k", str(disk))     # space freed
  code, err = _cli(["--workdir", str(run)], tmp_path)
  assert code == 0 and f"hybrid-jax: resuming {run} from step 2/8" in err, err
  assert not [p for p in (run / "checkpoints").iterdir() if "orbax-checkpoint-tmp" in p.name]
  assert checkpoint_steps(run) == checkpoint_steps(reference)
  assert _metrics(run) == _metrics(reference)


def test_leftovers_of_unfinished_saves_are_removed_and_only_they(tmp_path):
  from hybrid_jax.train.resume import remove_partial_saves
  ckpt = tmp_path / "checkpoints"
  for name in ("2", "3.orbax-checkpoint-tmp", "4.orbax-checkpoint-tmp-1700000000", "corrupt/5"):
    (ckpt / name / "default").mkdir(parents=True)
  assert remove_partial_saves(ckpt) == ["3.orbax-checkpoint-tmp", "4.orbax-checkpoint-tmp-1700000000"]
  assert sorted(p.name for p in ckpt.iterdir()) == ["2", "corrupt"] and (ckpt / "corrupt" / "5").is_dir()


def test_a_read_only_run_is_one_line_for_eval_collect_and_train_and_status_still_reads_it(
    tmp_path, reference, mounts, capsys):
  view = tmp_path / "ro"
  _read_only_view(reference, view, mounts)
  before = sorted(str(p.relative_to(reference)) for p in reference.rglob("*"))
  cases = {("eval", "--workdir", str(view), "--config.eval.examples=1"): "cannot evaluate",
           ("sweep", "collect", str(view)): f"cannot write {view}/collected.csv",
           ("train", "--workdir", str(view), "--quiet"): f"cannot write to {view}"}
  for argv, what in cases.items():
    assert cli.main(list(argv)) == 2, argv
    err = [l for l in capsys.readouterr().err.splitlines() if not _backend_log(l)]
    assert len(err) == 1 and err[0].startswith(f"hybrid-jax: error: {what}"), (argv, err)
    assert "read-only file system" in err[0].lower(), err
  assert cli.main(["sweep", "collect", str(view), "--out", str(tmp_path / "rows.csv")]) == 0
  assert (tmp_path / "rows.csv").read_text().startswith("run,")
  assert cli.main(["sweep", "status", str(view)]) == 0       # the locks are only read
  assert "done" in capsys.readouterr().out
  assert sorted(str(p.relative_to(reference)) for p in reference.rglob("*")) == before


def test_collect_into_a_read_only_root_suggests_out(tmp_path, reference, mounts):
  from hybrid_jax.errors import UserError
  from hybrid_jax.run.collect import collect_rows, write_rows
  from hybrid_jax.run.files import UnwritableError
  view = tmp_path / "ro"
  _read_only_view(reference, view, mounts)
  rows = collect_rows(view)
  with pytest.raises(UserError, match=f"cannot write {view}/collected.csv: {view} is on a "
                                      "read-only file system; pass --out FILE"):
    write_rows(rows, view / "collected.csv", default_out=True)
  with pytest.raises(UnwritableError, match=r"\(errno EROFS\)"):    # a path the user chose
    write_rows(rows, view / "mine.csv", default_out=False)


def test_a_missing_blob_in_the_latest_checkpoint_is_one_warning_and_training_resumes(tmp_path, reference):
  """Orbax closes its event loop when the read fails while TensorStore reads are still in
  flight; each then printed 'RuntimeError: Event loop is closed' with a traceback."""
  run = tmp_path / "run"
  shutil.copytree(reference, run)
  blobs = [f for f in (run / "checkpoints" / "8").rglob("*") if f.is_file() and f.parent.name == "d"]
  max(blobs, key=lambda f: f.stat().st_size).unlink()       # the data, not the metadata
  code, err = _cli(["--workdir", str(run)], tmp_path)
  assert code == 0 and not [l for l in err if not l.startswith("hybrid-jax: ")], err
  warnings = [l for l in err if "warning" in l]
  assert len(warnings) == 1 and "checkpoint 8 cannot be restored" in warnings[0], err
  assert f"hybrid-jax: resuming {run} from step 6/8" in err
  assert (run / "checkpoints" / "corrupt" / "8").is_dir() and checkpoint_steps(run)[-1] == 8
  assert _metrics(run) == _metrics(reference)


def test_a_run_left_running_is_marked_failed_only_by_the_process_holding_its_lock(tmp_path):
  run = RunDir(tmp_path / "run")
  run.mark_started(pid=12345)                               # the launcher's note, then a failure
  assert not run.fail_if_running("config.train.lr: must be > 0")     # no lock: a live trainer may
  assert run.read_status()["state"] == "running"
  run.lock()
  try:
    assert run.fail_if_running("config.train.lr: must be > 0\n(details)")
    status = run.read_status()
    assert (status["state"], status["error"], "pid" in status) == (
        "failed", "config.train.lr: must be > 0 (details)", False)
    assert not run.fail_if_running("again")                  # failed, done, preempted: kept
    assert run.read_status()["error"] == "config.train.lr: must be > 0 (details)"
  finally:
    run.unlock()


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
  assert len(err) == 1 and "1 .txt/.md files are not UTF-8 text, 0 are empty, 1 files have other suffixes" in err[0]
