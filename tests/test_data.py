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
