"""``bench loop``'s overhead figure: a bare jitted loop against the training loop, which
alternate which runs first, with the loop read by its median interval and by its span."""

import argparse
import json

from hybrid_jax.bench import loop as bench_loop


def _metrics(workdir, intervals, per_step):
  """metrics.jsonl of a run logged every 10 steps, the first record the compile's."""
  workdir.mkdir(parents=True, exist_ok=True)
  lines = [dict(step=10, tokens=10 * per_step, loss=1.0, tokens_per_s=1.0)]
  for i, seconds in enumerate(intervals):
    step = 20 + 10 * i
    lines.append(dict(step=step, tokens=step * per_step, loss=1.0, tokens_per_s=10 * per_step / seconds))
  (workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_the_loop_median_leaves_out_a_save_interval_and_its_span_counts_it(tmp_path):
  cfg = bench_loop._toy(argparse.Namespace(config=None, overrides=[]), 50)
  per_step = cfg.train.batch_size * cfg.data.seq_len
  _metrics(tmp_path / "run", [1.0, 1.0, 3.0, 1.0, 1.0], per_step)
  median, span = bench_loop._loop_tps(tmp_path / "run", cfg)
  assert abs(median - 10 * per_step) < 1e-6                     # 10 steps a second
  assert abs(span - 50 * per_step / 7.0) < 1e-6                # 50 steps in 7 s (the save's 3 s in)


def test_overhead_alternates_which_side_runs_first(tmp_path, monkeypatch):
  from hybrid_jax.train import loop
  calls = []

  def fake_train(cfg, workdir, progress=False):
    calls.append("loop")
    _metrics(workdir, [1.0, 1.0, 1.0], cfg.train.batch_size * cfg.data.seq_len)

  def fake_bare(cfg, steps):
    calls.append("bare")
    return 10 * cfg.train.batch_size * cfg.data.seq_len / 0.98

  monkeypatch.setattr(loop, "train", fake_train)
  monkeypatch.setattr(bench_loop, "_bare_tps", fake_bare)
  [row] = bench_loop.overhead(argparse.Namespace(steps=40, rounds=3, config=None, overrides=[]), tmp_path)
  assert calls == ["loop", "bare", "bare", "loop", "loop", "bare"]
  assert row["rounds"] == [0.98] * 3 and row["ratio"] == row["ratio_span"] == 0.98
  assert row["meets"] is True


def test_bench_loop_trains_the_config_file_with_its_overrides_but_keeps_its_own_steps():
  import pytest
  from hybrid_jax.bench import BenchError
  args, args.overrides = bench_loop._parser().parse_known_args(
      ["--config", "experiments/toy_study/config.py", "--config.model.window=8",
       "--config.train.steps=7", "--parts", "overhead"])
  cfg = bench_loop._toy(args, 30, every=1)
  assert cfg.model.pattern == "F" and cfg.model.window == 8 and cfg.data.seq_len == 64
  assert cfg.train.steps == 30 and cfg.checkpoint.every == 1      # what the bench compares
  with pytest.raises(BenchError, match="config.model.windw: unknown config key"):
    bench_loop.main(["--config.model.windw=8", "--parts", "overhead"])
