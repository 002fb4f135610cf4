"""experiments.toy_study.study: which runs are read, how seeds are aligned and summarised."""

import json
import pathlib

import numpy as np
import pytest

from experiments.toy_study import study

ROOT = pathlib.Path(__file__).resolve().parents[1]


def fake_run(root, name, *, pattern="SF", window=4, pos_full="rope", size="toy-xs", seed=0,
             budget=30.0, curve=(), state="done", n=197184, extra=None, old_eval=False):
  """A run directory as the trainer leaves it, with an eval curve of (step, far acc, short):
  ``short`` is the filler-token loss (the answer tokens' loss and the all-token mean beside
  it), and accuracy per distance bin is written too; ``old_eval``: records as `eval` wrote
  them before issue 18 (``short_loss`` over every token, no distance bins)."""
  path = root / name
  (path / "checkpoints" / "1").mkdir(parents=True)
  config = dict(model=dict(size=size, pattern=pattern, window=window, pos_full=pos_full,
                           n_layers=4),
                train=dict(seed=seed, tokens_per_param=budget),
                derived=dict(non_embedding_params=n, tokens=curve[-1][0] * 4096 if curve else 0))
  (path / "config.json").write_text(json.dumps(config))
  (path / "status.json").write_text(json.dumps(dict(state=state, step=0, total_steps=0, error=None,
                                                    updated="2099-01-01T00:00:00+0000")))
  lines = []
  for step, acc, short in curve:
    rec = {"step": step, "tokens": step * 4096, "settings_id": "s1", "short_loss": short,
           "retrieval_acc/kv_recall/64/d0.00": acc, "retrieval_acc/kv_recall/64/d0.25": acc,
           "retrieval_acc/kv_recall/64/d0.50": acc, "retrieval_acc/kv_recall/64": acc,
           "retrieval_acc/kv_recall/128/d0.00": acc / 2, "retrieval_acc/kv_recall/128/d0.25": acc / 2,
           "retrieval_acc/kv_recall/128/d0.50": acc / 2, "retrieval_acc/kv_recall/128": acc / 2,
           "settings": {"examples": 32, "depths": [0.0, 0.25, 0.5], "lengths": [64, 128]}}
    if not old_eval:
      rec.update({"short_loss_all": short + 0.05, "short_answer_loss": short + 1.0})
      for length, lo, hi, n_bin, a in ((64, 16, 32, 32, acc), (64, 32, 64, 64, acc),
                                       (128, 32, 64, 32, acc / 2), (128, 64, 128, 64, acc / 2)):
        rec[f"retrieval_acc_by_distance/kv_recall/{length}/{lo}-{hi}"] = a
        rec[f"retrieval_n_by_distance/kv_recall/{length}/{lo}-{hi}"] = n_bin
    rec.update(extra(step) if extra else {})
    lines.append(json.dumps(rec))
  (path / "eval.jsonl").write_text("\n".join(lines) + "\n")
  (path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": short}) + "\n"
                                              for s, _, short in curve))
  return path


def test_load_runs_keeps_finished_runs_and_their_latest_settings(tmp_path):
  fake_run(tmp_path, "a", curve=[(100, 0.1, 3.0), (200, 0.3, 2.9)])
  fake_run(tmp_path, "b", curve=[(100, 0.2, 3.0)], state="running")
  path = fake_run(tmp_path, "c", seed=1, curve=[(100, 0.5, 3.0)])
  with open(path / "eval.jsonl", "a") as f:   # an older settings id first: only the latest counts
    f.write(json.dumps({"step": 100, "tokens": 1, "settings_id": "s2", "short_loss": 9.0}) + "\n")
  runs = study.load_runs(tmp_path)
  assert [r.path.name for r in runs] == ["a", "c"]
  assert [r["step"] for r in runs[0].curve] == [100, 200]
  assert runs[1].curve[0]["short_loss"] == 9.0 and len(runs[1].curve) == 1
  with pytest.raises(study.StudyInputError, match="does not exist"):
    study.load_runs(tmp_path / "missing")


def test_select_and_labels(tmp_path):
  fake_run(tmp_path, "s1", seed=1, curve=[(100, 0.1, 3.0)])
  fake_run(tmp_path, "s0", seed=0, curve=[(100, 0.1, 3.0)])
  fake_run(tmp_path, "nope", pos_full="nope", curve=[(100, 0.1, 3.0)])
  fake_run(tmp_path, "f", pattern="F", window=16, curve=[(100, 0.1, 3.0)])
  runs = study.load_runs(tmp_path)
  sel = study.select(runs, pattern="SF", pos_full="rope", window=4)
  assert [r.seed for r in sel] == [0, 1]
  assert {r.label for r in runs} == {"SF w=4", "SF w=4 NoPE-full", "F"}
  with pytest.raises(TypeError, match="unknown selector"):
    study.select(runs, windw=4)


def test_curves_align_on_shared_steps(tmp_path):
  fake_run(tmp_path, "a", curve=[(100, 0.1, 3.0), (200, 0.2, 2.9), (300, 0.3, 2.8)])
  fake_run(tmp_path, "b", seed=1, curve=[(100, 0.0, 3.1), (300, 0.5, 2.7)])
  runs = study.load_runs(tmp_path)
  tokens, values = study.curves(runs, study.mean_of("retrieval_acc/kv_recall/64/d0.00",
                                                    "retrieval_acc/kv_recall/128"))
  np.testing.assert_array_equal(tokens, [100 * 4096, 300 * 4096])
  np.testing.assert_allclose(values, [[0.075, 0.225], [0.0, 0.375]])
  fake_run(tmp_path, "c", seed=2, curve=[(200, 0.1, 3.0)])
  with pytest.raises(study.StudyInputError, match="share no evaluated step"):
    study.curves(study.load_runs(tmp_path), study.mean_of("short_loss"))
  with pytest.raises(study.StudyInputError, match="no finished run"):
    study.curves([], study.mean_of("short_loss"))


def test_train_seconds_from_timestamps(tmp_path):
  path = fake_run(tmp_path, "a", curve=[(100, 0.1, 3.0)])
  run = study.load_runs(tmp_path)[0]
  import os
  import datetime
  end = datetime.datetime(2099, 1, 1, tzinfo=datetime.timezone.utc).timestamp()
  os.utime(path / "checkpoints" / "1", (end - 90, end - 90))
  assert run.train_seconds() == pytest.approx(90)
  assert study.train_minutes([run, run]) == pytest.approx((3.0, 1.5))


def test_markdown_table_and_atomic_report(tmp_path):
  text = study.markdown_table(["a", "b"], [[1, "2 [1, 3]"]])
  assert text.splitlines() == ["| a | b |", "|---|---|", "| 1 | 2 [1, 3] |"]
  study.write_report(tmp_path / "x" / "REPORT.md", "hello\n")
  assert (tmp_path / "x" / "REPORT.md").read_text() == "hello\n"


def test_examples_of_counts_what_an_accuracy_pools(tmp_path):
  fake_run(tmp_path, "a", curve=[(100, 0.1, 3.0)])
  runs = study.load_runs(tmp_path)
  assert study.examples_of(runs, study.mean_of("retrieval_acc/kv_recall/64/d0.00")) == 32
  assert study.examples_of(runs, study.mean_of("retrieval_acc/kv_recall/64/d0.00",
                                               "retrieval_acc/kv_recall/64/d0.25")) == 64
  assert study.examples_of(runs, study.mean_of("retrieval_acc/kv_recall/128")) == 96
  assert study.examples_of(runs, study.mean_of("short_loss")) is None


def test_bootstrap_intervals_cover_the_truth_and_are_byte_stable():
  from experiments.toy_study import bootstrap as B
  rng = np.random.default_rng(1)
  truth, covered = 0.4, 0
  for _ in range(40):           # 5 seeds of 64 examples each, drawn around a true 0.4
    acc = rng.binomial(64, np.clip(rng.normal(truth, 0.05, 5), 0, 1)) / 64
    iv = B.mean(acc, 64)
    covered += iv.lo <= truth <= iv.hi
    assert iv.lo <= iv.point <= iv.hi
  assert covered >= 30          # ~95% nominal; percentile intervals on 5 seeds run a bit narrow
  assert str(B.mean([0.2, 0.5, 0.9], 64)) == str(B.mean([0.2, 0.5, 0.9], 64))
  one = B.mean([0.5], 64)       # one seed: an interval over its examples only
  assert one.lo < 0.5 < one.hi
  assert (B.mean([0.5]).lo, B.mean([0.5]).hi) == (0.5, 0.5)
  assert B.mean([]).fmt() == "-"


def test_censored_crossings_stay_in_the_comparison():
  from experiments.toy_study import bootstrap as B
  tokens = np.array([1.0, 2.0, 3.0]) * 1e6
  v = np.array([[0.1, 0.3, 0.5], [0.0, 0.1, 0.2], [0.0, 0.0, 0.1]])
  np.testing.assert_array_equal(B.first_crossing_K(tokens, v, 0.25), [2e6, np.inf, np.inf])
  med = B.median_crossing(tokens, v, 0.25)
  assert med.point == np.inf and med.hi == np.inf         # 2 of 3 never: the median is censored
  r = B.ratio_of_medians(tokens, v, v[:1].repeat(3, 0), 0.25)
  assert r.point == np.inf and r.lo >= 1.0
  assert B.ratio_of_median_values([np.inf] * 3, [np.inf] * 3).point == 1.0   # nothing measured
  from experiments.toy_study.verdicts import tokens_fmt
  assert med.fmt(tokens_fmt(3e6)) == "> 3.00M [2.00M, > 3.00M]"


def test_verdict_rule_on_each_side_of_the_margin():
  from experiments.toy_study import verdicts as V
  from experiments.toy_study.bootstrap import Interval
  above = V.Claim("c", "p", "e", 0.1, "above")
  assert V.decide(above, Interval(0.3, 0.2, 0.4, 3)) == V.REPRODUCED
  assert V.decide(above, Interval(0.0, -0.1, 0.1, 3)) == V.NOT_REPRODUCED
  assert V.decide(above, Interval(0.1, 0.05, 0.2, 3)) == V.INCONCLUSIVE
  assert V.decide(above, Interval(0.3, 0.2, 0.4, 3), cannot_fail="a no-op") == V.INCONCLUSIVE
  below = V.Claim("c", "p", "e", 1.0, "below")
  assert V.decide(below, Interval(0.5, 0.2, 0.9, 3)) == V.REPRODUCED
  assert V.decide(below, Interval(2.0, 1.0, 3.0, 3)) == V.NOT_REPRODUCED
  within = V.Claim("c", "p", "e", 0.05, "within")
  assert V.decide(within, Interval(0.0, -0.04, 0.04, 3)) == V.REPRODUCED
  assert V.decide(within, Interval(-0.5, -0.6, -0.2, 3)) == V.NOT_REPRODUCED
  assert V.decide(within, Interval(0.0, -0.1, 0.1, 3)) == V.INCONCLUSIVE
  text = V.verdicts_section([V.judge(above, Interval(0.0, -0.1, 0.1, 3), "it failed.")])
  assert "**not reproduced**" in text and "- c (not reproduced): it failed." in text
  assert text.endswith("Summary (exploratory, not counted in the confirmatory summary): "
                       "0 reproduced, 1 not reproduced, 0 inconclusive.")


def test_exploratory_reports_say_so_and_never_claim_rules_came_first():
  """Issue 47: the first seeds' rules were written after their results. Each finding's
  report says it is exploratory and keeps its summary out of the confirmatory count."""
  from experiments.report import EXPLORATORY, Report
  assert EXPLORATORY in Report("t", "c").text()
  for name in ("scaling", "full_attention_carries_retrieval", "large_window_laziness",
               "nope_on_full", "paper_mix"):
    text = (ROOT / "experiments" / name / "REPORT.md").read_text()
    assert EXPLORATORY in text, name
    assert "before any result is read" not in text, name
    assert "\nSummary: " not in text, name


def test_store_export_keeps_outputs_not_checkpoints(tmp_path):
  from experiments.toy_study import store
  path = fake_run(tmp_path / "root", "a", curve=[(100, 0.1, 3.0)])
  (path / "analysis").mkdir()
  (path / "analysis" / "trace.json").write_text("{}")
  (path / "analysis" / "trace.png").write_bytes(b"png")
  (path / "analysis" / "other.json").write_text("{}")
  run = study.load_runs(tmp_path / "root")[0]
  out = store.export_run(run, tmp_path / "store", ("trace*",))
  assert sorted(p.name for p in out.iterdir()) == [
      "analysis", "config.json", "eval.jsonl", "metrics.jsonl", "status.json", "train.json"]
  assert [p.name for p in (out / "analysis").iterdir()] == ["trace.json"]
  stored = study.load_runs(tmp_path / "store")[0]      # the store reads as a run root
  assert stored.curve == run.curve and stored.train_seconds() == run.train_seconds()
  with pytest.raises(SystemExit, match="no stored run outputs in .*; fill it with: CMD"):
    store.require(tmp_path / "empty", "f", "CMD")


def test_measures_read_old_and_new_eval_records(tmp_path):
  """The short loss as eval defines it now (filler only) or, in a record from before the
  split, the all-token mean under its old name; accuracy pooled over distance bins by count."""
  from experiments.toy_study import measures as M
  new = {"short_loss": 2.0, "short_answer_loss": 3.0, "short_loss_all": 2.1,
         "retrieval_acc_by_distance/kv_recall/64/16-32": 0.5,
         "retrieval_n_by_distance/kv_recall/64/16-32": 10,
         "retrieval_acc_by_distance/kv_recall/64/32-64": 0.2,
         "retrieval_n_by_distance/kv_recall/64/32-64": 30}
  old = {"short_loss": 2.5}
  assert (M.short_filler(new), M.short_answer(new), M.short_all(new)) == (2.0, 3.0, 2.1)
  assert (M.short_filler(old), M.short_answer(old), M.short_all(old)) == (None, None, 2.5)
  assert M.bins_of(new, 64) == [(16, 32), (32, 64)] and M.bins_of(new, 128) == []
  far = M.pooled(64, 32)
  assert far(new) == pytest.approx(0.2) and far.examples(new) == 30
  every = M.pooled(64)
  assert every(new) == pytest.approx((0.5 * 10 + 0.2 * 30) / 40) and every.examples(new) == 40
  assert far(old) is None and M.pooled(64, only=(1, 2))(new) is None
  assert far({**new, "retrieval_n_by_distance/kv_recall/64/32-64": 0}) is None


def test_distance_table_intervals_and_not_measured(tmp_path):
  from experiments.toy_study import measures as M
  fake_run(tmp_path / "new", "a", curve=[(100, 0.25, 3.0), (200, 0.5, 2.9)])
  fake_run(tmp_path / "new", "b", seed=1, curve=[(100, 0.25, 3.0), (200, 0.5, 2.9)])
  fake_run(tmp_path / "old", "c", curve=[(100, 0.25, 3.0)], old_eval=True)
  new, old = study.load_runs(tmp_path / "new"), study.load_runs(tmp_path / "old")
  table = M.distance_table({"new": new, "old": old}, (64, 128), 32)
  lines = table.splitlines()
  assert lines[0] == ("| accuracy per distance [95% interval] | L=64 d 16-32 | L=64 d 32-64 * "
                      "| L=128 d 32-64 * | L=128 d 64-128 * |")
  # two seeds of 0.5 on 64 examples: Binomial(64, 0.5) / 64 per seed, seeds resampled
  from experiments.toy_study import bootstrap as B
  assert lines[2].split(" | ")[2] == str(B.mean([0.5, 0.5], 64))
  assert lines[3] == "| old (1) |" + " not measured |" * 4
  assert "L=64 d 32-64: n=64" in table
  assert M.distance_table({"old": old}, (64,), 32).startswith("Accuracy per distance: not measured")
  assert M.measured(new, M.pooled(64, 32)) and not M.measured(old, M.pooled(64, 32))
  assert M.examples(new, M.pooled(64, 32)) == 64


def test_cli_runs_hybrid_jax_in_a_child_and_says_which_command_failed(capfd):
  """What the runners call for every analysis (their tests run the commands in-process)."""
  study.cli("--help")                                   # exit 0: no error
  assert "usage" in capfd.readouterr().out.lower()      # the child's output is the user's
  with pytest.raises(study.StudyInputError, match=r"hybrid-jax no-such-command failed \(exit 2\)"):
    study.cli("no-such-command")
  study.cli("no-such-command", check=False)             # check=False: the failure is the caller's
  assert "no-such-command" in capfd.readouterr().err


def test_cli_all_runs_every_command_two_at_a_time_and_names_the_one_that_failed(capfd):
  """The confirmatory runners' analyses: children side by side, each single-threaded."""
  study.cli_all([("--help",), ("--help",)], parallel=2)
  assert capfd.readouterr().out.lower().count("usage") == 2
  with pytest.raises(study.StudyInputError, match=r"hybrid-jax no-such-command failed \(exit 2\)"):
    study.cli_all([("no-such-command",), ("--help",), ("--help",)], parallel=2)
  assert capfd.readouterr().out.lower().count("usage") == 2      # the others still ran
  study.cli_all([], parallel=2)                                     # nothing to do


def test_children_of_a_parallel_pool_are_single_threaded():
  from hybrid_jax.launch import local
  env = local.single_threaded({"XLA_FLAGS": "--xla_dump_to=x"})
  assert env["XLA_FLAGS"] == "--xla_dump_to=x --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
  assert local.single_threaded({"XLA_FLAGS": "intra_op_parallelism_threads=4"})["XLA_FLAGS"] == "intra_op_parallelism_threads=4"
