"""``hybrid-jax data`` (show, one-line errors) and ``hybrid-jax bench data``."""

import json

import pytest

from hybrid_jax.bench import data as bench
from hybrid_jax.data import tasks


def main(argv):
  """``hybrid-jax data ...``; a user error (exit 2, one line) raises SystemExit."""
  from hybrid_jax import cli
  code = cli.main(["data", *argv])
  if code:
    raise SystemExit(code)
  return code


def test_show_prints_a_task_example_with_its_answer_marked(capsys):
  assert main(["show", "niah_single_filler", "--length", "300", "--depth", "0.5", "--index", "2"]) == 0
  header, body = capsys.readouterr().out.split("\n", 1)
  ex = tasks.make_example("niah_single_filler", length=300, depth=0.5, seed=0, index=2)
  value = bytes(ex.tokens[ex.answer_positions].astype("uint8")).decode()
  assert header.startswith("# niah_single_filler: 300 tokens") and repr(value) in header
  assert body.rstrip("\n").endswith(f"Answer: [[{value}]]") and f"is: <<{value}>>." in body


def test_show_prints_a_mix_row_with_its_answers_marked(capsys):
  assert main(["show", "mix", "--seq-len", "128", "--row", "0", "--long-fraction", "1"]) == 0
  header, body = capsys.readouterr().out.split("\n", 1)
  assert header.startswith("# mix row 0 of step 0: long, 129 tokens")
  assert body.count("[[") == 4 == body.count("]]")   # at most seq_len/28 pairs


def test_show_mix_shows_the_row_kind_training_sees(capsys):
  """Which rows are long depends on the batch size: show must use the run's."""
  from hybrid_jax.resolve import resolve
  from hybrid_jax.data.mix import TrainingMix
  from conftest import tiny_config
  c = tiny_config()
  c.data.name, c.data.seq_len, c.data.n_pairs, c.train.batch_size = "mix", 128, 2, 8
  src = TrainingMix(resolve(c).data, batch_size=8)
  for step, row in ((3, 5), (7, 2)):
    assert main(["show", "mix", "--seq-len", "128", "--step", str(step), "--row", str(row),
                 "--batch-size", "8", "--seed", "0", "--n-pairs", "2"]) == 0
    kind = "long" if src.is_long(step, row) else "short"
    assert capsys.readouterr().out.startswith(f"# mix row {row} of step {step}: {kind}")


@pytest.mark.parametrize("argv, message", [
    (["show", "niah_nonsense"], "show: unknown 'niah_nonsense'"),
    (["show", "mqar", "--length", "5"], "length: 5 is below the minimum"),
    (["show", "mqar", "--depth", "2"], "depth: must be in [0, 1]"),
    (["show", "corpus"], "show corpus: --data is required"),
    (["show", "mix", "--seq-len", "128", "--n-pairs", "5"], "--n-pairs: must be in [0, seq_len/28 = 4]"),
    (["show", "mix", "--row", "8", "--batch-size", "8"], "--row: must be in [0, --batch-size=8)"),
    (["show", "corpus", "--data", "/nonexistent/dir"], "not a built corpus"),
    (["build", "--out", "x"], "the following arguments are required: --source"),
    (["build", "--source", "/nonexistent/dir", "--out", "x"], "not a directory"),
    (["tokenizer", "--data", "/nonexistent/dir"], "not a built corpus"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_arguments_fail_in_one_line(argv, message, capsys, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  with pytest.raises(SystemExit) as e:
    main(argv)
  assert e.value.code == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith("hybrid-jax: error:") and message in err
  assert list(tmp_path.iterdir()) == []


def test_bench_reports_rates_and_ratios_against_the_consumption(capsys):
  rows = bench.main(["--train-tokens-per-s", "1000", "--seconds", "0.05", "--length", "512",
                     "--seq-len", "128", "--tasks", "mqar,niah_single_filler"])
  assert [r["producer"] for r in rows] == ["mix", "mqar", "niah_single_filler"]
  for r in rows:
    assert r["examples_per_s"] > 0
    assert r["ratio"] == pytest.approx(r["tokens_per_s"] / 1000, rel=0.01, abs=0.1)
    assert r["ok"] == (r["tokens_per_s"] >= 10 * 1000)
  lines = capsys.readouterr().out.strip().split("\n")
  assert json.loads(lines[0]) == dict(producer="train_consumption", tokens_per_s=1000)
  assert lines[-1].startswith("data path: ")
