"""Task generators: exact length, answers an independent solver recovers from the decoded
text, evidence and answer positions, depth, determinism, one-line errors."""

import re

import numpy as np
import pytest

from hybrid_jax.data import tasks
from hybrid_jax.data.tokenizer import ByteTokenizer

TOK = ByteTokenizer()


def _magic(context, key):
  return re.findall(rf"special magic numbers for {re.escape(key)} is: (\d+)\.", context)


def solve(name, text):
  """The answer values an oracle reads off the decoded example (answers hidden)."""
  if name == "mqar":
    context, query = text.rsplit("\nQuery:", 1)
    pairs = dict(re.findall(r" ([a-z]{3}):(\d\d)(?=\s|$)", context))
    asked = re.findall(r" ([a-z]{3}):", query)
    return [pairs[k] for k in asked]
  if name == "variable_tracking":
    context, question = text.rsplit("\nQuestion:", 1)
    value = re.search(r"assigned the value (\d+)", question).group(1)
    found = []
    for var, rhs in re.findall(r"VAR ([A-Z]{5}) = (VAR [A-Z]{5}|\d+)\.", context):
      if rhs == value or rhs[4:] in found:
        found.append(var)
    return found
  context, question = text.rsplit("\nWhat ", 1)
  if name == "niah_multivalue":
    key = re.search(r"numbers for (\S+)\?", question).group(1)
    return _magic(context, key)
  if name == "niah_multiquery":
    keys = re.search(r"numbers for (.+)\?", question).group(1).replace(" and ", ", ").split(", ")
    return [_magic(context, k)[0] for k in keys]
  key = re.search(r"number for (\S+)\?", question).group(1)
  values = _magic(context, key)
  assert len(values) == 1
  return values


@pytest.mark.parametrize("name", tasks.TASK_NAMES)
def test_an_oracle_recovers_every_answer_from_the_decoded_context(name):
  for length in (tasks.min_length(name), 700):
    for depth in (0.0, 0.5, 1.0):
      for index in range(3):
        ex = tasks.make_example(name, length=length, depth=depth, seed=3, index=index)
        assert ex.tokens.dtype == np.int32 and ex.tokens.shape == (length,)
        first = ex.answer_positions.min()
        hidden = ex.tokens.copy()
        hidden[ex.answer_positions] = ord("_")      # the oracle sees no answer token
        expected = solve(name, TOK.decode(hidden))
        answers = TOK.decode(ex.tokens[first:])
        assert re.findall(r"[A-Z]{5}|\d+", answers) == expected
        # the answer tokens are exactly the value characters, ending the example
        assert "".join(expected) == TOK.decode(ex.tokens[ex.answer_positions])
        assert ex.answer_positions.max() == length - 1
        # evidence: the asked values, written in the context before the query
        assert sorted(TOK.decode(ex.tokens[ex.evidence_positions])) == sorted("".join(expected))
        assert ex.evidence_positions.max() < first


def test_depth_places_the_needle_at_that_fraction_of_the_context():
  length = 4096
  for name in ("niah_single_filler", "niah_single_prose", "variable_tracking"):
    starts = []
    for depth in (0.0, 0.25, 0.5, 0.75, 1.0):
      ex = tasks.make_example(name, length=length, depth=depth, seed=0, index=1)
      assert ex.depth == depth
      context = TOK.decode(ex.tokens).rfind("\n")          # the query starts on a new line
      starts.append(ex.evidence_positions.min() / context)  # a chain starts at depth
    assert np.all(np.diff(starts) > 0.2), (name, starts)
    assert np.allclose(starts, [0.0, 0.25, 0.5, 0.75, 1.0], atol=0.05), (name, starts)


def test_examples_do_not_depend_on_the_process_hash_seed():
  """Examples are a pure function of their arguments across processes, not only within one
  (string hashing, and so set order, changes with PYTHONHASHSEED)."""
  import os
  import subprocess
  import sys
  code = ("import hashlib; from hybrid_jax.data import tasks; h = hashlib.sha1(); "
          "[h.update(tasks.make_example(n, length=600, depth=0.3, seed=7, index=i).tokens.tobytes()) "
          "for n in tasks.TASK_NAMES for i in range(3)]; print(h.hexdigest())")
  digests = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "3")}
  assert len(digests) == 1, digests


def test_same_arguments_same_example_other_seed_or_index_another():
  for name in tasks.TASK_NAMES:
    a = tasks.make_example(name, length=600, depth=0.3, seed=7, index=2)
    b = tasks.make_example(name, length=600, depth=0.3, seed=7, index=2)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.answer_positions, b.answer_positions)
    for other in (dict(seed=8, index=2), dict(seed=7, index=3)):
      c = tasks.make_example(name, length=600, depth=0.3, **other)
      assert not np.array_equal(a.tokens[a.answer_positions], c.tokens[c.answer_positions])


def test_moving_the_needle_keeps_the_same_needle():
  a = tasks.make_example("niah_single_prose", length=1000, depth=0.1, seed=1, index=4)
  b = tasks.make_example("niah_single_prose", length=2000, depth=0.9, seed=1, index=4)
  assert TOK.decode(a.tokens[a.answer_positions]) == TOK.decode(b.tokens[b.answer_positions])


def test_make_batch_stacks_the_examples_with_their_masks():
  b = tasks.make_batch("niah_multivalue", length=500, depth=0.5, seed=2, indices=[4, 0])
  assert b["tokens"].shape == (2, 500) and b["tokens"].dtype == np.int32
  for row, index in enumerate([4, 0]):
    ex = tasks.make_example("niah_multivalue", length=500, depth=0.5, seed=2, index=index)
    np.testing.assert_array_equal(b["tokens"][row], ex.tokens)
    np.testing.assert_array_equal(np.flatnonzero(b["answer_mask"][row]), ex.answer_positions)
    np.testing.assert_array_equal(np.flatnonzero(b["evidence_mask"][row]), ex.evidence_positions)


def test_closed_value_set_reports_the_answer_class():
  seen = set()
  for index in range(40):
    ex = tasks.make_example("niah_single_filler", length=300, depth=0.5, seed=0, index=index,
                            n_classes=8)
    assert 0 <= ex.answer_class < 8
    assert TOK.decode(ex.tokens[ex.answer_positions]) == tasks.PROBE_VALUES[ex.answer_class]
    seen.add(ex.answer_class)
  assert len(seen) == 8
  assert tasks.make_example("niah_single_filler", length=300, depth=0.5, seed=0, index=0).answer_class == -1


def test_prose_haystack_comes_from_the_corpus():
  corpus = ["Alpha beta gamma. Delta epsilon zeta.\nEta theta iota. " * 20,
            "Kappa lambda mu. Nu xi omicron. " * 20]
  ex = tasks.make_example("niah_single_prose", length=800, depth=0.5, seed=0, index=0, corpus=corpus)
  text = TOK.decode(ex.tokens)
  assert "lambda mu" in text or "epsilon zeta" in text
  with pytest.raises(ValueError, match="^corpus: has no documents$"):
    tasks.make_example("niah_single_prose", length=800, depth=0.5, seed=0, index=0, corpus=[])


@pytest.mark.parametrize("kwargs, field", [
    (dict(name="niah_nonsense", length=500, depth=0.5), "name"),
    (dict(name="mqar", length=tasks.min_length("mqar") - 1, depth=0.5), "length"),
    (dict(name="niah_multikey", length=50, depth=0.5), "length"),
    (dict(name="mqar", length=500, depth=1.5), "depth"),
    (dict(name="mqar", length=500, depth=0.5, n_classes=8), "n_classes"),
    (dict(name="niah_single_filler", length=500, depth=0.5, n_classes=1000), "n_classes"),
])
def test_bad_arguments_fail_in_one_line_naming_the_argument(kwargs, field):
  for fn in (tasks.make_example, tasks.make_batch):
    extra = dict(index=0) if fn is tasks.make_example else dict(indices=[0])
    with pytest.raises(ValueError) as e:
      fn(**kwargs, seed=0, **extra)
    assert str(e.value).startswith(f"{field}:") and "\n" not in str(e.value)
  if kwargs["name"] == "niah_nonsense":
    with pytest.raises(ValueError, match="^name:"):
      tasks.min_length("niah_nonsense")


def test_byte_tokenizer_round_trips_any_text():
  text = "Grüße, 世界! tab\there\nnew line \x01"
  ids = TOK.encode(text)
  assert ids.dtype == np.int32 and ids.max() < TOK.vocab_size
  assert TOK.decode(ids) == text
  toks, lengths = TOK.encode_units(["ab", "ü", ""])
  assert lengths.tolist() == [2, 2, 0] and TOK.decode(toks) == "abü"
