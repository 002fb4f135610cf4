"""Long-context tasks in the token space of the ``synthetic`` training source, with the
contract of ``hybrid_jax.data.tasks`` (exact length, answer and evidence positions, a pure
function of the arguments, closed-set classes for probing).

A model trained on the synthetic source has never seen text, so the RULER-style text tasks
measure nothing on it; ``kv_recall`` asks what it was trained to do, at a controlled
distance:

  kv_recall  Zipf-word filler with ``N_NEEDLES`` facts ``KV key value`` (distinct keys), then
             the query ``Q key`` for the fact at ``depth``; the answer is its value token.
             The query-to-evidence distance is about (1 - depth) x length.
  kv_recall_start
             the same facts and query, with the asked fact first in the context and the
             query (1 - depth) of the filler after it, filler after the query: the same
             distances as ``kv_recall`` at each depth, with the fact always at offset 0.
             With the query last, distance and the fact's position move together; beside
             ``kv_recall`` this one separates them (same distance, another offset; and
             distance varied at a fixed offset).
  kv_recall_offset
             the distance fixed at half the length (the answer ``length // 2`` tokens after
             the asked value) and the fact's offset varied: at ``depth`` of the room there is
             (0: the fact first; 1: the query last), the other facts between fact and query,
             filler around them. Its depths move the position at one distance, as
             ``kv_recall_start``'s move the distance at one position.

Token ids are the synthetic source's (filler < 160, marks, keys, values < 256): the byte
tokenizer's vocabulary, which is what runs on that source use.
"""

import sys

import numpy as np

from hybrid_jax.data import synthetic as S
from hybrid_jax.data.tasks import Example, check_example_args, stack_examples
from hybrid_jax.data.tokenizer import ByteTokenizer

TASKS_VERSION = 1
TASK_NAMES = ("kv_recall", "kv_recall_start", "kv_recall_offset")
CLOSED_SET_TASKS = TASK_NAMES
MAX_CLASSES = len(S.VALUES)
N_NEEDLES = 4
NEEDLE, QUERY = 3, 3             # KV key value / Q key value
MIN_HAYSTACK = 16
_TAG = 0x4B56


def min_length(name: str) -> int:
  if name not in TASK_NAMES:
    check_example_args(sys.modules[__name__], name, 0, 0.0, 0)   # the unknown-name error
  return N_NEEDLES * NEEDLE + QUERY + MIN_HAYSTACK


def _check_args(name, length, depth, n_classes, tokenizer=None):
  check_example_args(sys.modules[__name__], name, length, depth, n_classes)
  if tokenizer is not None and not isinstance(tokenizer, ByteTokenizer):
    raise ValueError(f"tokenizer: task {name!r} is written in the synthetic source's token ids, "
                     "which only the byte tokenizer's vocabulary holds")


def _filler(rng, n):
  words, lengths, probs = S.lexicon()
  ids = rng.choice(len(probs), size=n // 2 + 1, p=probs)
  keep = np.arange(words.shape[1])[None, :] < lengths[ids][:, None]
  return words[ids][keep][:n].astype(np.int32)


def make_example(name: str, *, length: int, depth: float, seed: int, index: int,
                 tokenizer=None, corpus=None, n_classes: int = 0) -> Example:
  """One example of ``length`` tokens (``corpus`` is unused: the filler is the source's)."""
  _check_args(name, length, depth, n_classes, tokenizer)
  rng = np.random.default_rng([seed, index, _TAG, 0])
  keys = rng.choice(S.KEYS, size=N_NEEDLES, replace=False)
  cls = int(rng.integers(n_classes)) if n_classes else -1
  values = rng.choice(S.VALUES, size=N_NEEDLES)
  if n_classes:
    values[0] = S.VALUES[cls]
  context = length - QUERY
  budget = context - N_NEEDLES * NEEDLE                    # filler tokens
  hay = _filler(np.random.default_rng([seed, index, _TAG, 1]), budget)
  if name == "kv_recall_start":
    return _start_example(rng, keys, values, hay, depth, cls, length)
  if name == "kv_recall_offset":
    return _offset_example(rng, keys, values, hay, depth, cls, length)
  # Needle 0 (the asked one) goes at ``depth`` of the filler, the others at seeded depths.
  at = [int(round(depth * budget))] + sorted(int(x) for x in rng.integers(0, budget + 1, N_NEEDLES - 1))
  order = sorted(range(N_NEEDLES), key=lambda i: (at[i], i))
  parts, cursor, evidence = [], 0, None
  for i in order:
    parts.append(hay[cursor:at[i]])
    cursor = at[i]
    start = sum(len(p) for p in parts)
    parts.append(_fact(keys, values, i))
    if i == 0:
      evidence = start + 2
  parts.append(hay[cursor:])
  parts.append(_query(keys, values))
  tokens = np.concatenate(parts).astype(np.int32)
  assert len(tokens) == length, (len(tokens), length)
  return Example(tokens=tokens, answer_positions=np.array([length - 1]),
                 evidence_positions=np.array([evidence]), depth=float(depth), answer_class=cls)


def _start_example(rng, keys, values, hay, depth, cls, length) -> Example:
  """``kv_recall_start``: the asked fact first, the query after (1 - depth) of the filler
  (the other facts at seeded places between them), the rest of the filler after it."""
  gap = int(round((1.0 - depth) * len(hay)))              # filler between the fact and the query
  parts = [_fact(keys, values, 0), *_facts_between(rng, keys, values, hay[:gap])]
  answer = sum(len(p) for p in parts) + 2
  tokens = np.concatenate(parts + [_query(keys, values), hay[gap:]]).astype(np.int32)
  assert len(tokens) == length, (len(tokens), length)
  return Example(tokens=tokens, answer_positions=np.array([answer]), evidence_positions=np.array([2]),
                 depth=float(depth), answer_class=cls)


def _offset_example(rng, keys, values, hay, depth, cls, length) -> Example:
  """``kv_recall_offset``: the asked fact at ``depth`` of the room, the answer exactly
  ``length // 2`` tokens after its value, the other facts at seeded places between them."""
  distance = length // 2
  gap = distance - NEEDLE * N_NEEDLES                     # filler between the fact and the query
  offset = int(round(depth * (length - QUERY - distance)))
  parts = [hay[:offset], _fact(keys, values, 0),
           *_facts_between(rng, keys, values, hay[offset:offset + gap]),
           _query(keys, values), hay[offset + gap:]]
  tokens = np.concatenate(parts).astype(np.int32)
  assert len(tokens) == length, (len(tokens), length)
  return Example(tokens=tokens, answer_positions=np.array([offset + 2 + distance]),
                 evidence_positions=np.array([offset + 2]), depth=float(depth), answer_class=cls)


def _fact(keys, values, i):
  return np.array([S.KV_MARK, keys[i], values[i]], np.int32)


def _query(keys, values):
  return np.array([S.Q_MARK, keys[0], values[0]], np.int32)


def _facts_between(rng, keys, values, filler) -> list:
  """``filler`` with the facts other than the asked one at seeded places in it."""
  at = sorted(int(x) for x in rng.integers(0, len(filler) + 1, N_NEEDLES - 1))
  parts, cursor = [], 0
  for i, a in zip(range(1, N_NEEDLES), at):
    parts += [filler[cursor:a], _fact(keys, values, i)]
    cursor = a
  return parts + [filler[cursor:]]


def make_batch(name: str, *, length: int, depth: float, seed: int, indices, tokenizer=None,
               corpus=None, n_classes: int = 0) -> dict:
  _check_args(name, length, depth, n_classes, tokenizer)
  return stack_examples([make_example(name, length=length, depth=depth, seed=seed, index=int(i),
                                      tokenizer=tokenizer, corpus=corpus, n_classes=n_classes)
                         for i in indices], length)
