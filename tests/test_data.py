"""The synthetic retrieval mixture: stateless, sliceable, and its answers are retrievable."""

import numpy as np

from conftest import tiny_config
from hybrid_jax.resolve import resolve
from hybrid_jax.data import make_source
from hybrid_jax.data import synthetic as syn


def _source(**data):
  c = tiny_config()
  c.data.seq_len = 256
  c.data.n_pairs = 8
  for k, v in data.items():
    c.data[k] = v
  return make_source(resolve(c))


def test_batch_is_a_pure_function_of_seed_and_step():
  a, b = _source(), _source()
  for step in (0, 7, 10_000):
    for key in ("inputs", "targets", "answer_mask"):
      np.testing.assert_array_equal(a.batch(step)[key], b.batch(step)[key])
  assert not np.array_equal(a.batch(1)["inputs"], a.batch(2)["inputs"])
  assert not np.array_equal(a.batch(1)["inputs"], _source(seed=5).batch(1)["inputs"])


def test_any_slice_of_rows_equals_that_slice_of_the_batch():
  src = _source()
  full = src.batch(3)
  part = src.batch(3, rows=range(1, 3))
  np.testing.assert_array_equal(part["inputs"], full["inputs"][1:3])


def test_every_answer_is_the_value_stored_under_its_key_earlier():
  src = _source()
  batch = src.batch(11)
  seen = 0
  for inputs, targets, mask in zip(batch["inputs"], batch["targets"], batch["answer_mask"]):
    assert np.array_equal(inputs[1:], targets[:-1])
    for pos in np.flatnonzero(mask):
      key, value = inputs[pos], targets[pos]
      assert inputs[pos - 1] == syn.Q_MARK and syn.KEYS[0] <= key <= syn.KEYS[-1]
      evidence = [i for i in range(pos - 1) if inputs[i] == syn.KV_MARK and inputs[i + 1] == key]
      assert len(evidence) == 1 and inputs[evidence[0] + 2] == value
      seen += 1
  assert seen >= 0.9 * 8 * len(batch["inputs"])


def test_distances_span_short_and_long_range():
  src = _source()
  dists = []
  for step in range(20):
    b = src.batch(step)
    for inputs, mask in zip(b["inputs"], b["answer_mask"]):
      for pos in np.flatnonzero(mask):
        ev = [i for i in range(pos - 1) if inputs[i] == syn.KV_MARK and inputs[i + 1] == inputs[pos]]
        dists.append(pos - ev[0])
  dists = np.array(dists)
  assert (dists < 16).mean() > 0.1 and (dists > 128).mean() > 0.1


def _plain_row(src, step, row):
  """The row as first written (rng.choice with p, rng.choice(VALUES), a numpy occupancy
  mask): the reference a faster ``row`` must match draw for draw, so runs trained before
  it see the same data when rerun."""
  rng = np.random.default_rng([src.seed, step, row])
  n = src.seq_len + 1
  ids = rng.choice(syn.LEXICON_WORDS, size=n // 2 + 1, p=src.probs)
  keep = np.arange(syn.MAX_WORD)[None, :] < src.lengths[ids][:, None]
  tokens = src.words[ids][keep][:n].astype(np.int32)
  answer, taken = np.zeros(src.seq_len, bool), np.zeros(n, bool)
  lo, hi = max(3, src.min_distance), n - 3
  for key in rng.permutation(syn.KEYS)[:src.n_pairs]:
    if hi <= lo:
      break
    for _ in range(16):
      dist = int(np.exp(rng.uniform(np.log(lo), np.log(hi))))
      a = int(rng.integers(0, n - 2 - dist))
      b = a + dist
      if not (taken[a:a + 3].any() or taken[b:b + 3].any()):
        value = rng.choice(syn.VALUES)
        tokens[a:a + 3], tokens[b:b + 3] = (syn.KV_MARK, key, value), (syn.Q_MARK, key, value)
        taken[a:a + 3] = taken[b:b + 3] = True
        answer[b + 1] = True
        break
  return tokens, answer


def test_rows_are_the_plain_per_key_sampler_draw_for_draw():
  """GeneratorDraws computes a row's ~60 draws from raw outputs: every row checked is the
  plain sampler's, at odd shapes and over many rows of the toy default and of the
  confirmatory pilot's far-supervision recipe."""
  odd = [(data, ((0, 0), (3, 5), (10_000, 7))) for data in (
      dict(), dict(seq_len=128, n_pairs=16, min_distance=32), dict(n_pairs=0),
      dict(seq_len=24, n_pairs=4, min_distance=20), dict(seed=9), dict(seq_len=40, n_pairs=1, seed=2))]
  many = [(data, [(step, row) for step in (0, 1, 999, 123_456) for row in range(40)]) for data in (
      dict(seq_len=64), dict(seq_len=64, min_distance=16, seed=3))]
  for data, rows in odd + many:
    src = _source(**data)
    for step, row in rows:
      tokens, answer = src.row(step, row)
      want_tokens, want_answer = _plain_row(src, step, row)
      np.testing.assert_array_equal(tokens, want_tokens, err_msg=f"{data, step, row}")
      np.testing.assert_array_equal(answer, want_answer)
      assert tokens.dtype == want_tokens.dtype


def test_generator_draws_match_numpy_across_ranges_and_a_buffered_half():
  for seed in range(20):
    ours, theirs = np.random.default_rng(seed), np.random.default_rng(seed)
    ours.permutation(10), theirs.permutation(10)          # leaves a 32-bit half buffered
    draws = syn.GeneratorDraws(ours)
    for high in (1, 2, 3, 62, 1000, 2 ** 31 + 7, 2 ** 32, 5, 17):
      assert draws.below(high) == int(theirs.integers(0, high)), (seed, high)
      assert draws.random() == theirs.random()
