"""The training mix (``data.name = "mix"``): long and short sequences, ``data.long_fraction``
of them long, every row a pure function of (seed, step, row).

Long rows are ``seq_len`` tokens of prose (corpus documents, or prose generated from the
seed) carrying ``n_pairs`` retrieval pairs in MQAR form: the pair " abc:42" is written once
(evidence) and again later (query), and the second copy's value tokens are the answers. The
query-to-evidence distance follows ``data.distance`` over [min_distance, seq_len] (default
log-uniform), so windows of every size see a realistic share of short-range dependencies.
Short rows pack documents of ``data.short_len`` tokens (a window of a random document)
separated by the tokenizer's end-of-document id; nothing is padded.

Which rows are long follows a Weyl sequence over the global row index step*B + row, so every
batch is within two rows of the configured fraction, yet row kinds need no state.
"""

import numpy as np

from hybrid_jax.data import text as T
from hybrid_jax.data.corpus import open_corpus
from hybrid_jax.data.tokenizer import load_tokenizer

DISTANCES = ("log_uniform", "uniform")
PAIR_CHARS = 7           # " abc:42": the most tokens a pair takes (byte tokenizer)
_PHI = (np.sqrt(5.0) - 1) / 2
_TAG = 0x4D4958          # separates the mix's random streams from other sources'
_HELDOUT_TAG = 0x484C44


def max_pairs(seq_len: int) -> int:
  """Pairs (two copies each) may cover at most half of a long row."""
  return seq_len // (4 * PAIR_CHARS)


def sample_distance(rng, kind: str, lo: int, hi: int) -> int:
  """An integer distance in [lo, hi]: floor of a log-uniform (or uniform) draw on [lo, hi+1)."""
  if kind == "log_uniform":
    return min(hi, int(np.exp(rng.uniform(np.log(lo), np.log(hi + 1)))))
  return int(rng.integers(lo, hi + 1))


def distance_cdf(kind: str, lo: int, hi: int, k):
  """P(distance <= k) of ``sample_distance``, for tests and diagnostics."""
  k = np.clip(np.asarray(k, float), lo - 1, hi)
  if kind == "log_uniform":
    return (np.log(k + 1) - np.log(lo)) / (np.log(hi + 1) - np.log(lo))
  return (k + 1 - lo) / (hi + 1 - lo)


class TrainingMix:
  """Batches of dicts: inputs, targets [B, T] int32; answer_mask [B, T] bool (pair answers)."""

  def __init__(self, data_cfg, *, batch_size: int, tokenizer=None, corpus=None):
    self.seq_len, self.batch_size, self.seed = data_cfg.seq_len, batch_size, data_cfg.seed
    self.n_pairs, self.min_distance = data_cfg.n_pairs, data_cfg.min_distance
    self.long_fraction, self.short_len = data_cfg.long_fraction, data_cfg.short_len
    self.distance = data_cfg.distance
    self.tokenizer = tokenizer or load_tokenizer(data_cfg.tokenizer)
    self.corpus_dir = data_cfg.corpus or None
    if corpus is None and self.corpus_dir:
      corpus = open_corpus(self.corpus_dir, "train")
    self.corpus, self._validation_corpus = corpus, None
    self.offset = (self.seed * _PHI * _PHI) % 1.0

  # --- row kinds --------------------------------------------------------------------------

  def is_long(self, step: int, row: int) -> bool:
    g = step * self.batch_size + row
    return bool((g * _PHI + self.offset) % 1.0 < self.long_fraction)

  # --- text -------------------------------------------------------------------------------

  def _document_window(self, rng, n_tokens: int, corpus) -> np.ndarray:
    """Up to ``n_tokens`` tokens of one document, from a random sentence start."""
    if corpus is None:
      units = T.generated_sentences(rng, n_tokens + 16)
      return self.tokenizer.encode("".join(units))[:n_tokens]
    doc = corpus[int(rng.integers(len(corpus)))]
    start = int(rng.integers(max(1, len(doc) - n_tokens)))
    i = doc.rfind(". ", 0, start) if start else -1
    start = i + 2 if i >= 0 else 0        # the sentence's first character, or the document's
    return self.tokenizer.encode(doc[start:start + 8 * n_tokens + 64])[:n_tokens]

  def _packed(self, rng, n: int, doc_len: int, corpus="train") -> np.ndarray:
    """Documents of at most ``doc_len`` tokens, each followed by the end-of-document id."""
    corpus = self.corpus if corpus == "train" else corpus
    parts, total = [], 0
    eos = np.array([self.tokenizer.eos_id], np.int32)
    while total < n:
      doc = self._document_window(rng, doc_len, corpus)
      parts += [doc, eos]
      total += len(doc) + 1
    return np.concatenate(parts)[:n].astype(np.int32)

  # --- retrieval pairs --------------------------------------------------------------------

  def _pair_tokens(self, rng):
    keys = rng.choice(26 ** 3, size=self.n_pairs, replace=False)
    values = rng.integers(10, 100, size=self.n_pairs)
    units = []
    for k, v in zip(keys, values):
      units += [" " + "".join(chr(97 + k // 26 ** i % 26) for i in (2, 1, 0)) + ":", str(v)]
    toks, lengths = self.tokenizer.encode_units(units)
    ends = np.cumsum(lengths)
    out = []
    for i in range(self.n_pairs):
      lo = ends[2 * i - 1] if i else 0
      out.append((toks[lo:ends[2 * i + 1]], int(lengths[2 * i])))   # (pair tokens, key length)
    return out

  def _insert_pairs(self, rng, tokens, answer):
    """Overwrite evidence/query copies of each pair at a sampled distance; mark the answers.

    All distances are drawn first and the longest placed first, while the row is emptiest:
    a distance is redrawn only when no placement fits it, which keeps the realised
    distances close to the configured law (checked by a KS test)."""
    n = len(tokens)
    pairs = self._pair_tokens(rng)
    lo, hi = max(self.min_distance, PAIR_CHARS), n - PAIR_CHARS
    if hi < lo:
      return []
    wanted = [sample_distance(rng, self.distance, lo, hi) for _ in pairs]
    taken = np.zeros(n, np.int64)
    distances = []
    for i in np.argsort(wanted, kind="stable")[::-1]:
      pair, key_len = pairs[i]
      width, d = len(pair), wanted[i]
      for attempt in range(8):
        if attempt:
          d = sample_distance(rng, self.distance, lo, hi)
        csum = np.concatenate([[0], np.cumsum(taken)])
        busy = (csum[width:] - csum[:-width]) > 0          # busy[a]: [a, a+width) overlaps
        starts = np.flatnonzero(~busy[:n - width - d + 1] & ~busy[d:n - width + 1])
        if len(starts):
          a = int(starts[rng.integers(len(starts))])
          b = a + d
          tokens[a:a + width] = pair
          tokens[b:b + width] = pair
          taken[a:a + width] = taken[b:b + width] = 1
          answer[b + key_len:b + width] = True
          distances.append(d)
          break
    return distances

  # --- rows and batches -------------------------------------------------------------------

  def row(self, step: int, row: int):
    """(tokens [T+1] int32, answer [T+1] bool: token i is an answer, distances list)."""
    rng = np.random.default_rng([self.seed, step, row, _TAG])
    n = self.seq_len + 1
    answer = np.zeros(n, bool)
    if not self.is_long(step, row):
      return self._packed(rng, n, self.short_len), answer, []
    tokens = self._packed(rng, n, n)
    distances = self._insert_pairs(rng, tokens, answer)
    return tokens, answer, distances

  def heldout_batch(self, index: int, rows: range | None = None) -> dict:
    """Natural text never trained on (the corpus validation split, or generated prose from
    a separate stream): documents packed whole up to seq_len, for held-out loss and LongPPL."""
    rows = range(self.batch_size) if rows is None else rows
    validation = self._validation()
    tokens = []
    for r in rows:
      rng = np.random.default_rng([self.seed, index, r, _HELDOUT_TAG])
      tokens.append(self._packed(rng, self.seq_len + 1, self.seq_len + 1, corpus=validation))
    tokens = np.stack(tokens)
    return dict(inputs=tokens[:, :-1], targets=tokens[:, 1:],
                answer_mask=np.zeros(tokens[:, 1:].shape, bool))

  def _validation(self):
    if self.corpus is None or self.corpus_dir is None:
      return None
    if self._validation_corpus is None:
      self._validation_corpus = open_corpus(self.corpus_dir, "validation")
    return self._validation_corpus

  def batch(self, step: int, rows: range | None = None) -> dict:
    rows = range(self.batch_size) if rows is None else rows
    tokens, answer, _ = zip(*(self.row(step, r) for r in rows))
    tokens, answer = np.stack(tokens), np.stack(answer)
    # answer_mask[i] marks the position whose target (token i+1) is an answer.
    return dict(inputs=tokens[:, :-1], targets=tokens[:, 1:], answer_mask=answer[:, 1:])
