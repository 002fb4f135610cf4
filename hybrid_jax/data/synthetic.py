"""Synthetic text-like data with dense long-range retrieval, indexed statelessly.

Each sequence is filler "prose" (words of a fixed Zipf-distributed lexicon, so there is
local structure to learn) with ``n_pairs`` key/value facts written as ``KV key value`` and
queried later as ``Q key value``. The query-to-evidence distance is log-uniform over
[min_distance, seq_len], so windows of every size see a realistic share of short-range
dependencies. Row r of step s comes from its own generator seeded by (seed, s, r): any
process can build exactly its slice of any batch, and a resume needs no iterator state.
"""

import numpy as np

from hybrid_jax.data.config import DataConfig

MIN_VOCAB = 256
N_FILLER = 160
KV_MARK, Q_MARK = 160, 161
KEYS = np.arange(162, 194)
VALUES = np.arange(194, 256)
LEXICON_SEED = 20260602     # the "language" is the same for every run and seed
LEXICON_WORDS, MAX_WORD = 1024, 6


def lexicon():
  """(words [W, MAX_WORD], lengths [W], Zipf probabilities [W]): the filler "language",
  the same for every run and seed; the synthetic tasks draw their filler from it too."""
  rng = np.random.default_rng(LEXICON_SEED)
  lengths = rng.integers(2, MAX_WORD + 1, size=LEXICON_WORDS)
  words = rng.integers(0, N_FILLER, size=(LEXICON_WORDS, MAX_WORD))
  probs = 1.0 / np.arange(1, LEXICON_WORDS + 1) ** 1.1
  return words, lengths, probs / probs.sum()


_DOUBLE = 1.0 / 9007199254740992.0     # 2^-53
_MASK32 = 0xFFFFFFFF


class GeneratorDraws:
  """Scalar draws of a PCG64 ``np.random.Generator``, bit for bit as its methods make them,
  computed in Python from the raw 64-bit outputs they consume: a ``rng.integers`` call costs
  ~2 us of numpy overhead, and a row's rejection sampling makes ~60 of them.

  numpy's rules (``distributions.c``): a double is ``(next64 >> 11) * 2^-53`` and
  ``uniform(lo, hi)`` is ``lo + (hi - lo) * double``; ``integers(0, m)`` with m - 1 < 2^32 is
  Lemire's rejection on 32-bit draws, and a 32-bit draw takes the low half of a fresh 64-bit
  output and keeps the high half for the next one (``has_uint32``, which a ``permutation``
  can leave set). Outputs are fetched 64 at a time, so the generator itself runs ahead: use
  it no further once this takes over. ``tests/test_data.py`` holds the numpy-call reference."""

  __slots__ = ("_bitgen", "_raw", "_i", "_has32", "_u32")

  def __init__(self, rng: np.random.Generator):
    self._bitgen = rng.bit_generator
    state = self._bitgen.state
    if state["bit_generator"] != "PCG64":
      raise ValueError(f"GeneratorDraws emulates PCG64, not {state['bit_generator']}")
    self._has32, self._u32 = state["has_uint32"], state["uinteger"]
    self._raw, self._i = [], 0

  def _next64(self) -> int:
    if self._i == len(self._raw):
      self._raw, self._i = self._bitgen.random_raw(64).tolist(), 0
    self._i += 1
    return self._raw[self._i - 1]

  def _next32(self) -> int:
    if self._has32:
      self._has32 = 0
      return self._u32
    v = self._next64()
    self._has32, self._u32 = 1, v >> 32
    return v & _MASK32

  def random(self) -> float:
    """``rng.random()``."""
    return (self._next64() >> 11) * _DOUBLE

  def below(self, high: int) -> int:
    """``rng.integers(0, high)``, 1 <= high <= 2^32."""
    if not 1 <= high <= 1 << 32:
      raise ValueError(f"below: high must be in [1, 2^32], got {high}")
    if high == 1:
      return 0                          # numpy draws nothing for a single value
    if high == 1 << 32:
      return self._next32()
    m = self._next32() * high
    leftover = m & _MASK32
    if leftover < high:
      threshold = (_MASK32 - (high - 1)) % high
      while leftover < threshold:
        m = self._next32() * high
        leftover = m & _MASK32
    return m >> 32


class SyntheticRetrieval:
  """Batches of dicts: inputs, targets [B, T] int32; answer_mask [B, T] bool (query values)."""

  def __init__(self, data_cfg, *, batch_size: int):
    data_cfg = DataConfig.from_config(data_cfg)
    self.seq_len, self.batch_size = data_cfg.seq_len, batch_size
    self.seed, self.n_pairs, self.min_distance = data_cfg.seed, data_cfg.n_pairs, data_cfg.min_distance
    self.words, self.lengths, self.probs = lexicon()
    self.cdf = self.probs.cumsum()          # what rng.choice(p=probs) computes on every call
    self.cdf /= self.cdf[-1]

  def row(self, step: int, row: int):
    """(tokens [T+1], answer_mask [T]) of one row: a pure function of (seed, step, row)."""
    rng = np.random.default_rng([self.seed, step, row])
    n = self.seq_len + 1
    # rng.choice(LEXICON_WORDS, size=n // 2 + 1, p=self.probs), the same draws without
    # re-checking and re-summing p for every row
    ids = self.cdf.searchsorted(rng.random(n // 2 + 1), side="right")
    keep = np.arange(MAX_WORD)[None, :] < self.lengths[ids][:, None]
    tokens = self.words[ids][keep][:n].astype(np.int32).tolist()
    answer = np.zeros(self.seq_len, bool)
    taken = bytearray(n)          # plain bytes: a 3-slot check per try costs no numpy call
    keys = rng.permutation(KEYS)[:self.n_pairs].tolist()
    lo, hi = max(3, self.min_distance), n - 3
    if hi > lo:
      draws = GeneratorDraws(rng)   # rng.uniform / rng.integers, bit for bit, at a tenth the cost
      log_lo = float(np.log(lo))
      log_range = float(np.log(hi)) - log_lo
      for key in keys:
        for _ in range(16):   # rejection-sample a free placement (~7 tries a pair at T = 64)
          dist = int(np.exp(log_lo + log_range * draws.random()))   # rng.uniform(log_lo, log_hi)
          a = draws.below(n - 2 - dist)                             # rng.integers(0, n - 2 - dist)
          b = a + dist
          if not (any(taken[a:a + 3]) or any(taken[b:b + 3])):
            value = int(VALUES[draws.below(len(VALUES))])          # rng.choice(VALUES)
            tokens[a:a + 3] = (KV_MARK, key, value)
            tokens[b:b + 3] = (Q_MARK, key, value)
            taken[a:a + 3] = taken[b:b + 3] = b"\x01\x01\x01"
            answer[b + 1] = True      # input b+1 is the key; its target b+2 is the value
            break
    return np.array(tokens, np.int32), answer

  def batch(self, step: int, rows: range | None = None) -> dict:
    rows = range(self.batch_size) if rows is None else rows
    tokens, answer = zip(*(self.row(step, r) for r in rows))
    tokens = np.stack(tokens)
    return dict(inputs=tokens[:, :-1], targets=tokens[:, 1:], answer_mask=np.stack(answer))
