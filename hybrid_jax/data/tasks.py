"""Synthetic long-context tasks in the RULER family, plus MQAR, at any length and needle depth.

An example is a pure function of (name, length, depth, seed, index, tokenizer, corpus):
context (a haystack with needles inserted between its sentence units), then a query, then
the answer tokens at the very end. Every piece of text is encoded on its own, so the token
positions of the needle values (evidence) and of the answers are known exactly.

Tasks (RULER's wording, shortened so they fit toy contexts):
  niah_single_filler  one needle in repeated filler ("The grass is green. ...")
  niah_single_prose   one needle in prose (corpus documents, or prose generated from the seed)
  niah_multikey       four needles with different keys in prose; one is asked for
  niah_multivalue     four needles with the same key; all values asked, in order of appearance
  niah_multiquery     four needles with different keys; all four asked
  variable_tracking   a chain "VAR A = 12345. VAR B = VAR A. ..." (plus a distractor chain)
                      in filler; every name assigned the value is asked
  mqar                multi-query associative recall: " abc:42" pairs, then four keys queried

The needle that ``depth`` places is the first of the task's targets (the asked needle, the
first of a chain); the other needles go to depths drawn from the seed.
"""

import dataclasses
import functools
import sys

import numpy as np

from hybrid_jax.data import text as T
from hybrid_jax.data.tokenizer import ByteTokenizer

TASKS_VERSION = 2   # bump when the examples a (name, length, depth, seed, index) yields change

TASK_NAMES = ("niah_single_filler", "niah_single_prose", "niah_multikey", "niah_multivalue",
              "niah_multiquery", "variable_tracking", "mqar")
MIN_HAYSTACK = 16        # haystack tokens every example keeps at its shortest
N_NEEDLES = 4            # needles of the multi-key/-value/-query tasks
N_QUERIES_MQAR = 4
VT_HOPS, VT_CHAINS = 4, 2
MAX_CLASSES = 64
# The closed value set of the probing variants (``n_classes``): fixed for every seed.
PROBE_VALUES = tuple(str(v) for v in np.random.default_rng(20260615).choice(
    np.arange(1_000_000, 10_000_000), size=MAX_CLASSES, replace=False))
CLOSED_SET_TASKS = ("niah_single_filler", "niah_single_prose", "niah_multikey")


@dataclasses.dataclass(frozen=True)
class Example:
  tokens: np.ndarray             # int32 [length]: context, query, answer tokens at the end
  answer_positions: np.ndarray   # int [A]: tokens[p] is predicted from the logits at p-1
  evidence_positions: np.ndarray # int [E]: where the answer value is written in the context
  depth: float                   # share of the haystack before the first target needle
  answer_class: int              # index in PROBE_VALUES (with n_classes), else -1


# --- random choices, or their longest case (for min_length) -------------------------------

class _Draw:
  """The random choices a task makes; ``_Longest`` makes the longest-text ones instead."""

  def __init__(self, rng):
    self.rng = rng

  def keys(self, n):
    idx = self.rng.choice(len(T.ADJECTIVES) * len(T.NOUNS), size=n, replace=False)
    return [f"{T.ADJECTIVES[i // len(T.NOUNS)]}-{T.NOUNS[i % len(T.NOUNS)]}" for i in idx]

  def numbers(self, n, digits):
    lo = 10 ** (digits - 1)
    return [str(v) for v in self.rng.choice(9 * lo, size=n, replace=False) + lo]

  def names(self, n, k, first="A"):
    """n distinct k-letter names: distinct ids drawn without replacement, spelled in base
    26 (no set iteration, whose order would follow the per-process string hash)."""
    ids = self.rng.choice(26 ** k, size=n, replace=False)
    return ["".join(chr(ord(first) + int(i) // 26 ** (k - 1 - j) % 26) for j in range(k)) for i in ids]

  def fracs(self, n):
    return list(self.rng.random(n))

  def permutation(self, n):
    return list(self.rng.permutation(n))

  def integer(self, n):
    return int(self.rng.integers(n))


class _Longest(_Draw):
  def __init__(self):
    super().__init__(None)

  def keys(self, n):
    return [f"{max(T.ADJECTIVES, key=len)}-{max(T.NOUNS, key=len)}"] * n

  def numbers(self, n, digits):
    return ["9" * digits] * n

  def names(self, n, k, first="A"):
    return [chr(ord(first) + 25) * k] * n

  def fracs(self, n):
    return [0.0] * n

  def permutation(self, n):
    return list(range(n))

  def integer(self, n):
    return 0


# --- task plans: needles (depth, segments), query segments, haystack kind ------------------
# A segment is (text, role): role "evidence" in needles, "answer" in the query, else None.

@dataclasses.dataclass
class _Plan:
  haystack: str                  # "filler" | "prose" | "mqar"
  needles: list                  # [(depth, [(text, role), ...]), ...]
  query: list                    # [(text, role), ...]
  answer_class: int = -1
  avoid: tuple = ()              # MQAR keys the haystack must not use


def _magic_needle(key, value, evidence=True):
  return [(f" One of the special magic numbers for {key} is: ", None),
          (value, "evidence" if evidence else None), (".", None)]


def _values(draw, n, n_classes):
  if n_classes:
    c = draw.integer(n_classes)
    return [PROBE_VALUES[c]] + draw.numbers(n - 1, 7), c
  return draw.numbers(n, 7), -1


def _niah_single(draw, depth, n_classes, haystack):
  key, = draw.keys(1)
  (value,), cls = _values(draw, 1, n_classes)
  query = [(f"\nWhat is the special magic number for {key}? Answer: ", None), (value, "answer")]
  return _Plan(haystack, [(depth, _magic_needle(key, value))], query, cls)


def _niah_multikey(draw, depth, n_classes):
  keys = draw.keys(N_NEEDLES)
  values, cls = _values(draw, N_NEEDLES, n_classes)
  depths = [depth] + draw.fracs(N_NEEDLES - 1)
  needles = [(d, _magic_needle(k, v, i == 0)) for i, (d, k, v) in enumerate(zip(depths, keys, values))]
  query = [(f"\nWhat is the special magic number for {keys[0]}? Answer: ", None), (values[0], "answer")]
  return _Plan("prose", needles, query, cls)


def _answer_list(values):
  out = []
  for i, v in enumerate(values):
    out += [(", " if i else "", None), (v, "answer")]
  return [s for s in out if s[0]]


def _niah_multivalue(draw, depth):
  key, = draw.keys(1)
  values = draw.numbers(N_NEEDLES, 7)
  depths = [depth] + draw.fracs(N_NEEDLES - 1)
  order = sorted(range(N_NEEDLES), key=lambda i: (depths[i], i))   # order of appearance
  needles = [(depths[i], _magic_needle(key, values[i])) for i in range(N_NEEDLES)]
  query = [(f"\nWhat are all the special magic numbers for {key}? Answer: ", None)]
  return _Plan("prose", needles, query + _answer_list([values[i] for i in order]))


def _niah_multiquery(draw, depth):
  keys = draw.keys(N_NEEDLES)
  values = draw.numbers(N_NEEDLES, 7)
  depths = [depth] + draw.fracs(N_NEEDLES - 1)
  needles = [(d, _magic_needle(k, v)) for d, k, v in zip(depths, keys, values)]
  asked = draw.permutation(N_NEEDLES)
  names = ", ".join(keys[i] for i in asked[:-1]) + f" and {keys[asked[-1]]}"
  query = [(f"\nWhat are the special magic numbers for {names}? Answer: ", None)]
  return _Plan("prose", needles, query + _answer_list([values[i] for i in asked]))


def _variable_tracking(draw, depth):
  n_vars = VT_HOPS + 1
  names = draw.names(VT_CHAINS * n_vars, 5)
  values = draw.numbers(VT_CHAINS, 5)
  needles = []
  for c in range(VT_CHAINS):
    chain = names[c * n_vars:(c + 1) * n_vars]
    start = depth if c == 0 else draw.fracs(1)[0]
    depths = sorted([start] + [start + (1 - start) * f for f in draw.fracs(VT_HOPS)])
    role = "evidence" if c == 0 else None
    for i, (d, name) in enumerate(zip(depths, chain)):
      rhs = values[c] if i == 0 else f"VAR {chain[i - 1]}"
      needles.append((d, [(" VAR ", None), (name, role), (f" = {rhs}.", None)]))
  query = [(f"\nQuestion: Find all variables that are assigned the value {values[0]} in the text "
            "above. Answer:", None)]
  for name in names[:n_vars]:
    query += [(" ", None), (name, "answer")]
  return _Plan("filler", needles, query)


def _mqar(draw, depth):
  keys = draw.names(N_QUERIES_MQAR, 3, first="a")
  values = draw.numbers(N_QUERIES_MQAR, 2)
  depths = [depth] + draw.fracs(N_QUERIES_MQAR - 1)
  needles = [(d, [(f" {k}:", None), (v, "evidence")]) for d, k, v in zip(depths, keys, values)]
  query = [("\nQuery:", None)]
  for i in draw.permutation(N_QUERIES_MQAR):
    query += [(f" {keys[i]}:", None), (values[i], "answer")]
  return _Plan("mqar", needles, query, avoid=tuple(keys))


def _plan(name, draw, depth, n_classes):
  if n_classes and name not in CLOSED_SET_TASKS:
    raise ValueError(f"n_classes: task {name!r} has no single closed-set answer "
                     f"(closed-set tasks: {', '.join(CLOSED_SET_TASKS)})")
  if name == "niah_single_filler":
    return _niah_single(draw, depth, n_classes, "filler")
  if name == "niah_single_prose":
    return _niah_single(draw, depth, n_classes, "prose")
  if name == "niah_multikey":
    return _niah_multikey(draw, depth, n_classes)
  if name == "niah_multivalue":
    return _niah_multivalue(draw, depth)
  if name == "niah_multiquery":
    return _niah_multiquery(draw, depth)
  if name == "variable_tracking":
    return _variable_tracking(draw, depth)
  return _mqar(draw, depth)


# --- haystacks: (tokens, unit start offsets), at least n tokens ----------------------------

_FILLER_CACHE = {}


def _filler(tokenizer, n):
  block = _FILLER_CACHE.get(tokenizer.name)
  if block is None:
    block = _FILLER_CACHE[tokenizer.name] = tokenizer.encode_units(list(T.FILLER))
  tokens, lengths = block
  reps = n // len(tokens) + 1
  starts = (np.arange(reps)[:, None] * len(tokens) + np.concatenate([[0], np.cumsum(lengths)[:-1]]))
  return np.tile(tokens, reps), starts.reshape(-1)


def _units_haystack(tokenizer, n, next_units):
  toks, lens, total = [], [], 0
  while total < n:
    t, l = tokenizer.encode_units(next_units(n - total))
    toks.append(t)
    lens.append(l)
    total += len(t)
  lengths = np.concatenate(lens)
  return np.concatenate(toks), np.concatenate([[0], np.cumsum(lengths)[:-1]])


def _prose(tokenizer, n, rng, corpus):
  if corpus is None:
    return _units_haystack(tokenizer, n, lambda m: T.generated_sentences(rng, m))
  if len(corpus) == 0:
    raise ValueError("corpus: has no documents")

  def next_doc(m):
    doc = corpus[int(rng.integers(len(corpus)))]
    units = T.sentence_units(doc[:8 * m + 64]) or [" "]
    units[0] = "\n\n" + units[0]
    return units
  return _units_haystack(tokenizer, n, next_doc)


def _mqar_pairs(tokenizer, n, rng, avoid):
  avoid_ids = {sum((ord(c) - 97) * 26 ** (2 - i) for i, c in enumerate(k)) for k in avoid}

  def pairs(m):
    count = m // 4 + 8
    ids = rng.integers(0, 26 ** 3, size=count)
    ids = ids[~np.isin(ids, list(avoid_ids))]
    vals = rng.integers(10, 100, size=len(ids))
    letters = np.stack([ids // 676, ids // 26 % 26, ids % 26], 1) + 97
    return [f" {bytes(l.astype(np.uint8)).decode()}:{v}" for l, v in zip(letters, vals)]
  return _units_haystack(tokenizer, n, pairs)


def _haystack(plan, tokenizer, n, rng, corpus):
  if plan.haystack == "filler":
    return _filler(tokenizer, n)
  if plan.haystack == "prose":
    return _prose(tokenizer, n, rng, corpus)
  return _mqar_pairs(tokenizer, n, rng, plan.avoid)


# --- assembly ------------------------------------------------------------------------------

def _fixed_length(plan, tokenizer):
  segs = [s for _, needle in plan.needles for s in needle] + plan.query
  return int(tokenizer.encode_units([s for s, _ in segs])[1].sum())


def _check_name(name):
  if not isinstance(name, str) or name not in TASK_NAMES:
    raise ValueError(f"name: unknown task {name!r} (known: {', '.join(TASK_NAMES)})")


@functools.lru_cache(maxsize=None)
def min_length(name: str) -> int:
  """The shortest context the task can be built at (with the byte tokenizer, which no
  subword tokenizer exceeds: a piece is at least one byte)."""
  _check_name(name)
  return _fixed_length(_plan(name, _Longest(), 0.0, 0), ByteTokenizer()) + MIN_HAYSTACK


def check_example_args(family, name, length, depth, n_classes):
  """The argument errors every task family shares (``family``: a module with TASK_NAMES,
  min_length and MAX_CLASSES), each naming its argument."""
  if not isinstance(name, str) or name not in family.TASK_NAMES:
    raise ValueError(f"name: unknown task {name!r} (known: {', '.join(family.TASK_NAMES)})")
  if isinstance(length, bool) or not isinstance(length, (int, np.integer)):
    raise ValueError(f"length: must be an integer (got {length!r})")
  shortest = family.min_length(name)
  if length < shortest:
    raise ValueError(f"length: {length!r} is below the minimum {shortest} of task {name!r}")
  if not 0.0 <= depth <= 1.0:
    raise ValueError(f"depth: must be in [0, 1] (got {depth!r})")
  if n_classes and not 2 <= n_classes <= family.MAX_CLASSES:
    raise ValueError(f"n_classes: must be in [2, {family.MAX_CLASSES}] (got {n_classes!r})")


def _check_args(name, length, depth, n_classes):
  check_example_args(sys.modules[__name__], name, length, depth, n_classes)


def make_example(name: str, *, length: int, depth: float, seed: int, index: int,
                 tokenizer=None, corpus=None, n_classes: int = 0) -> Example:
  """One example of ``length`` tokens; a pure function of its arguments. The same
  (seed, index) at another depth or length has the same needles, moved or re-padded.

  ``n_classes`` > 0 (closed-set tasks only) draws the asked value from the first
  ``n_classes`` of PROBE_VALUES and reports its index as ``answer_class`` (for probing).
  """
  _check_args(name, length, depth, n_classes)
  tokenizer = tokenizer or ByteTokenizer()
  task_id = TASK_NAMES.index(name)
  plan = _plan(name, _Draw(np.random.default_rng([seed, index, task_id, 0])), depth, n_classes)
  segs = [s for _, needle in plan.needles for s in needle] + plan.query
  seg_toks, seg_lens = tokenizer.encode_units([s for s, _ in segs])
  budget = length - int(seg_lens.sum())
  if budget < MIN_HAYSTACK:
    raise ValueError(f"length: {length} leaves no haystack for task {name!r} with this tokenizer")
  hay, starts = _haystack(plan, tokenizer, budget, np.random.default_rng([seed, index, task_id, 1]),
                          corpus)
  hay = hay[:budget]
  bounds = np.unique(np.concatenate([starts[starts <= budget], [budget]]))

  seg_starts = np.concatenate([[0], np.cumsum(seg_lens)])
  # Needle i is its own token block; it goes to the unit boundary nearest its depth.
  sizes = [len(n) for _, n in plan.needles]
  first_seg = np.concatenate([[0], np.cumsum(sizes)])
  insert_at = []
  for d, _ in plan.needles:
    target = d * budget
    insert_at.append(int(bounds[np.argmin(np.abs(bounds - target))]))
  # Ties (needles at one boundary) keep their depth order, which is the order of appearance.
  order = sorted(range(len(plan.needles)), key=lambda i: (insert_at[i], plan.needles[i][0], i))

  parts, roles_pos, cursor, out_len = [], {"evidence": [], "answer": []}, 0, 0

  def emit_segments(lo, hi):
    nonlocal out_len
    for s in range(lo, hi):
      a, b = seg_starts[s], seg_starts[s + 1]
      role = segs[s][1]
      if role:
        roles_pos[role].append(np.arange(out_len, out_len + b - a))
      parts.append(seg_toks[a:b])
      out_len += b - a

  for i in order:
    parts.append(hay[cursor:insert_at[i]])
    out_len += insert_at[i] - cursor
    cursor = insert_at[i]
    emit_segments(first_seg[i], first_seg[i + 1])
  parts.append(hay[cursor:])
  out_len += budget - cursor
  emit_segments(first_seg[-1], len(segs))
  tokens = np.concatenate(parts).astype(np.int32)
  assert len(tokens) == length, (len(tokens), length)
  cat = lambda xs: np.concatenate(xs).astype(np.int64) if xs else np.zeros(0, np.int64)
  return Example(tokens=tokens, answer_positions=cat(roles_pos["answer"]),
                 evidence_positions=cat(roles_pos["evidence"]), depth=float(depth),
                 answer_class=plan.answer_class)


def make_batch(name: str, *, length: int, depth: float, seed: int, indices, tokenizer=None,
               corpus=None, n_classes: int = 0) -> dict:
  """dict(tokens int32 [N, length], answer_mask / evidence_mask bool [N, length],
  answer_class int32 [N]) of the examples ``indices``."""
  _check_args(name, length, depth, n_classes)
  return stack_examples([make_example(name, length=length, depth=depth, seed=seed, index=int(i),
                                      tokenizer=tokenizer, corpus=corpus, n_classes=n_classes)
                         for i in indices], length)


def stack_examples(examples, length: int) -> dict:
  """make_batch's dict from a list of Examples (shared by every task family)."""
  n = len(examples)
  answer = np.zeros((n, length), bool)
  evidence = np.zeros((n, length), bool)
  for r, ex in enumerate(examples):
    answer[r, ex.answer_positions] = True
    evidence[r, ex.evidence_positions] = True
  tokens = np.stack([ex.tokens for ex in examples]) if n else np.zeros((0, length), np.int32)
  return dict(tokens=tokens, answer_mask=answer, evidence_mask=evidence,
              answer_class=np.array([ex.answer_class for ex in examples], np.int32))
