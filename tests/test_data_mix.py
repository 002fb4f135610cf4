"""The training mix: row kinds in proportion, distances following their distribution,
answers retrievable, rows a pure function of (seed, step, row), config rules, training."""

import re

import numpy as np
import pytest

from conftest import tiny_config
from hybrid_jax.configs import ConfigError
from hybrid_jax.resolve import resolve
from hybrid_jax.data import make_source
from hybrid_jax.data import mix as M
from hybrid_jax.data.tokenizer import ByteTokenizer

TOK = ByteTokenizer()


def _cfg(**data):
  c = tiny_config()
  c.data.name = "mix"
  c.data.seq_len, c.data.n_pairs, c.data.short_len = 256, 8, 48
  c.train.batch_size = 8
  for k, v in data.items():
    c.data[k] = v
  return c


def _source(**data):
  return make_source(resolve(_cfg(**data)))


def test_make_source_dispatches_on_the_name():
  assert isinstance(_source(), M.TrainingMix)
  c = _cfg()
  c.data.name = "synthetic"
  assert not isinstance(make_source(resolve(c)), M.TrainingMix)


@pytest.mark.parametrize("fraction", [0.5, 0.25])
def test_long_rows_make_up_the_configured_fraction_in_every_batch(fraction):
  src = _source(long_fraction=fraction)
  per_batch = np.array([[src.is_long(s, r) for r in range(8)] for s in range(200)])
  assert abs(per_batch.mean() - fraction) < 0.01
  assert np.all(np.abs(per_batch.sum(1) - 8 * fraction) <= 1)
  for batch_size, f in ((64, 0.3), (256, 0.37), (13, fraction)):   # the docstring's bound
    src_b = M.TrainingMix(resolve(_cfg(long_fraction=f)).data, batch_size=batch_size)
    kinds = np.array([[src_b.is_long(s, r) for r in range(batch_size)] for s in range(50)])
    assert np.all(np.abs(kinds.sum(1) - batch_size * f) <= 2), (batch_size, f)
  b = src.batch(3)
  for r in range(8):   # long rows carry answers, short rows none
    assert b["answer_mask"][r].any() == per_batch[3, r]


def _pairs_in(inputs, targets, mask):
  """(distance, key, value) of each answer run, found from the tokens alone."""
  text = TOK.decode(np.concatenate([inputs[:1], targets]))
  out = []
  answer = np.concatenate([[False], mask])     # answer[i]: token i of `text` is an answer
  for run in re.finditer(r"1+", "".join("1" if a else "0" for a in answer)):
    b = run.start()
    key = text[b - 5:b]                          # " abc:" before the value
    value = text[b:run.end()]
    assert re.fullmatch(r" [a-z]{3}:", key) and re.fullmatch(r"\d\d", value)
    first = text.index(key + value)
    assert first < b - 5                         # written earlier: the evidence
    out.append((b - (first + 5), key, value))
  return out


def test_every_answer_repeats_a_pair_written_earlier_at_the_reported_distance():
  src = _source()
  for step in range(6):
    b = src.batch(step)
    for r in range(8):
      found = _pairs_in(b["inputs"][r], b["targets"][r], b["answer_mask"][r])
      _, _, distances = src.row(step, r)
      assert sorted(d for d, _, _ in found) == sorted(distances)
      if src.is_long(step, r):
        assert len(found) == 8


def _ks(samples, cdf):
  """Kolmogorov-Smirnov distance of integer samples to an integer law's CDF."""
  x = np.unique(samples)
  at = np.searchsorted(np.sort(samples), x, side="right") / len(samples)     # P(D <= x)
  below = np.searchsorted(np.sort(samples), x, side="left") / len(samples)   # P(D < x)
  return max(np.max(np.abs(at - cdf(x))), np.max(np.abs(below - cdf(x - 1))))


@pytest.mark.parametrize("kind, other", [("log_uniform", "uniform"), ("uniform", "log_uniform")])
def test_distances_follow_the_configured_distribution(kind, other):
  """KS: the configured law is not rejected; the other one is, by far."""
  src = _source(seq_len=1024, n_pairs=8, distance=kind, long_fraction=1.0)
  d = np.array([x for s in range(60) for r in range(8) for x in src.row(s, r)[2]])
  assert len(d) > 3500
  lo, hi = 7, 1025 - 7
  assert d.min() >= lo and d.max() <= hi
  critical = 1.63 / np.sqrt(len(d))             # KS test at the 1% level
  assert _ks(d, lambda k: M.distance_cdf(kind, lo, hi, k)) < critical
  assert _ks(d, lambda k: M.distance_cdf(other, lo, hi, k)) > 0.2
  if kind == "log_uniform":    # windows of every size see their share of dependencies
    assert (d < 32).mean() > 0.2 and (d > 256).mean() > 0.2


def test_rows_are_a_pure_function_of_seed_step_and_row():
  a, b = _source(), _source()
  for step in (0, 5, 123_456):
    for key in ("inputs", "targets", "answer_mask"):
      np.testing.assert_array_equal(a.batch(step)[key], b.batch(step)[key])
  part = a.batch(4, rows=range(2, 6))
  np.testing.assert_array_equal(part["inputs"], a.batch(4)["inputs"][2:6])
  np.testing.assert_array_equal(part["answer_mask"], a.batch(4)["answer_mask"][2:6])
  assert not np.array_equal(a.batch(1)["inputs"], a.batch(2)["inputs"])
  assert not np.array_equal(a.batch(1)["inputs"], _source(seed=9).batch(1)["inputs"])


def test_short_rows_pack_short_documents_without_padding():
  src = _source(long_fraction=0.0, short_len=40)
  b = src.batch(0)
  assert b["inputs"].shape == (8, 256) and b["inputs"].dtype == np.int32
  assert b["answer_mask"].dtype == bool and not b["answer_mask"].any()
  for row in np.concatenate([b["inputs"], b["targets"][:, -1:]], 1):
    cuts = np.flatnonzero(row == TOK.eos_id)
    lengths = np.diff(np.concatenate([[-1], cuts])) - 1
    assert len(cuts) >= 256 // 41 and lengths.max() <= 40 and lengths.min() >= 1


def test_heldout_text_is_deterministic_and_not_a_training_row():
  src = _source()
  h = src.heldout_batch(0, rows=range(3))
  np.testing.assert_array_equal(h["inputs"], _source().heldout_batch(0, rows=range(3))["inputs"])
  assert h["inputs"].shape == (3, 256) and not h["answer_mask"].any()
  # No 48-token stretch of held-out text occurs in training rows (a shared random stream
  # would repeat whole sentences; independent streams of this prose practically never do).
  windows = lambda rows: {row[i:i + 48].tobytes() for row in rows for i in range(len(row) - 47)}
  train = windows([src.batch(s)["inputs"][r] for s in range(5) for r in range(8)])
  assert not windows(h["inputs"]) & train
  assert not np.array_equal(h["inputs"], src.heldout_batch(1, rows=range(3))["inputs"])


def test_corpus_text_fills_the_rows_and_heldout_text_is_the_validation_split(tmp_path):
  from test_data_corpus import write_texts

  from hybrid_jax.data.corpus import build, open_corpus
  write_texts(tmp_path / "src", n=12)
  build([str(tmp_path / "src")], tmp_path / "data", validation_fraction=0.3)
  splits = {s: [d[i] for d in [open_corpus(tmp_path / "data", s)] for i in range(len(d))]
            for s in ("train", "validation")}
  src = _source(corpus=str(tmp_path / "data"), long_fraction=0.0, short_len=40)

  def pieces(tokens_NxT):
    return [p for row in tokens_NxT for p in TOK.decode(row).split("\x00") if len(p) > 20]

  train_pieces = pieces(src.batch(0)["inputs"])
  held_pieces = pieces(src.heldout_batch(0, rows=range(4))["inputs"])
  assert len(train_pieces) > 20 and len(held_pieces) > 0
  assert all(any(p in d for d in splits["train"]) for p in train_pieces)
  assert all(any(p in d for d in splits["validation"]) for p in held_pieces)
  assert not any(any(p in d for d in splits["validation"]) for p in train_pieces)


@pytest.mark.parametrize("data, field", [
    (dict(n_pairs=20), "data.n_pairs"),
    (dict(long_fraction=1.5), "data.long_fraction"),
    (dict(short_len=0), "data.short_len"),
    (dict(short_len=300), "data.short_len"),
    (dict(distance="gaussian"), "data.distance"),
    (dict(corpus="/nonexistent/corpus"), "data.corpus"),
    (dict(tokenizer="/nonexistent/tokenizer.model"), "data.tokenizer"),
])
def test_bad_mix_settings_fail_in_one_line_naming_the_field(data, field):
  with pytest.raises(ConfigError) as e:
    resolve(_cfg(**data))
  assert str(e.value).startswith(f"config.{field}:") and "\n" not in str(e.value)


CONFIG_FILE = """
from hybrid_jax.configs.base import base_config

def get_config():
  c = base_config()
  c.model.size = "custom"
  c.model.d_model, c.model.n_layers, c.model.n_heads, c.model.n_kv_heads = 32, 2, 4, 2
  c.model.window = 8
  c.train.batch_size, c.train.steps, c.train.warmup_steps, c.train.log_every = 4, 3, 1, 1
  return c
"""


def test_hybrid_jax_train_runs_on_the_mix(tmp_path):
  from hybrid_jax.cli import main
  from hybrid_jax.run import RunDir
  config = tmp_path / "tiny.py"
  config.write_text(CONFIG_FILE)
  main(["train", "--config", str(config), "--workdir", str(tmp_path / "run"),
        "--config.data.name=mix", "--config.data.seq_len=64", "--config.data.n_pairs=2",
        "--config.data.short_len=16"])
  records = RunDir(tmp_path / "run").read_metrics()
  assert [r["step"] for r in records] == [1, 2, 3]
  assert all(np.isfinite(r["loss"]) and r["grad_norm"] > 0 for r in records)
