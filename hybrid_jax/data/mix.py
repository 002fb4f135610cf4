"""The training mix (``data.name = "mix"``): long and short sequences, ``data.long_fraction``
of them long, every row a pure function of (seed, step, row).

Long rows are ``seq_len`` tokens of prose (a window of one corpus document where one is that
long, else corpus documents packed; or prose generated from the seed) carrying ``n_pairs`` retrieval pairs in MQAR form: the pair " abc:42" is written once
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
from hybrid_jax.data.config import DataConfig
from hybrid_jax.data.token_ids import TokenIds
from hybrid_jax.data.tokenizer import load_tokenizer

DISTANCES = ("log_uniform", "uniform")
PAIR_CHARS = 7           # " abc:42": the most tokens a pair takes (byte tokenizer)
_PHI = (np.sqrt(5.0) - 1) / 2
_TAG = 0x4D4958          # separates the mix's random streams from other sources'
_HELDOUT_TAG = 0x484C44


def max_pairs(seq_len: int) -> int:
  """Pairs (two copies each) may cover at most half of a long row."""
  return seq_len // (4 * PAIR_CHARS)


def sample_distances(rng, kind: str, lo: int, hi: int, size: int) -> np.ndarray:
  """``size`` integer distances in [lo, hi]: floors of log-uniform (or uniform) draws on
  [lo, hi+1)."""
  if kind == "log_uniform":
    return np.minimum(hi, np.exp(rng.uniform(np.log(lo), np.log(hi + 1), size)).astype(np.int64))
  return rng.integers(lo, hi + 1, size=size)


def sample_distance(rng, kind: str, lo: int, hi: int) -> int:
  """One draw of ``sample_distances``' law."""
  return int(sample_distances(rng, kind, lo, hi, 1)[0])


def distance_cdf(kind: str, lo: int, hi: int, k):
  """P(distance <= k) of ``sample_distance``, for tests and diagnostics."""
  k = np.clip(np.asarray(k, float), lo - 1, hi)
  if kind == "log_uniform":
    return (np.log(k + 1) - np.log(lo)) / (np.log(hi + 1) - np.log(lo))
  return (k + 1 - lo) / (hi + 1 - lo)


class TrainingMix:
  """Batches of dicts: inputs, targets [B, T] int32; answer_mask [B, T] bool (pair answers).

  With a corpus, rows are assembled from its token ids (``hybrid_jax.data.token_ids``,
  made once by ``hybrid-jax data tokenize``): no text is tokenized per step, and a row costs
  a few numpy slices whatever the documents' sizes. Without one, prose is generated from the
  seed and tokenized per row (the pipeline's smoke path, not a corpus)."""

  def __init__(self, data_cfg, *, batch_size: int, tokenizer=None, corpus=None):
    data_cfg = DataConfig.from_config(data_cfg)
    self.seq_len, self.batch_size, self.seed = data_cfg.seq_len, batch_size, data_cfg.seed
    self.n_pairs, self.min_distance = data_cfg.n_pairs, data_cfg.min_distance
    self.long_fraction, self.short_len = data_cfg.long_fraction, data_cfg.short_len
    self.distance = data_cfg.distance
    self.tokenizer = tokenizer or load_tokenizer(data_cfg.tokenizer)
    self.corpus_dir = data_cfg.corpus or None
    self.tokenizer_spec = data_cfg.tokenizer
    if corpus is None and self.corpus_dir:
      corpus = TokenIds(self.corpus_dir, self.tokenizer_spec, "train")
    self.corpus, self._validation_corpus = corpus, None
    self.offset = (self.seed * _PHI * _PHI) % 1.0
    self._pair_units = None
    self._long_docs = None

  # --- row kinds --------------------------------------------------------------------------

  def is_long(self, step: int, row: int) -> bool:
    g = step * self.batch_size + row
    return bool((g * _PHI + self.offset) % 1.0 < self.long_fraction)

  # --- documents --------------------------------------------------------------------------

  def _generated(self, rng, n_tokens: int) -> np.ndarray:
    units = T.generated_sentences(rng, n_tokens + 16)
    return self.tokenizer.encode("".join(units))[:n_tokens]

  def _packed(self, rng, n: int, doc_len: int, corpus="train") -> np.ndarray:
    """Windows of at most ``doc_len`` tokens of random documents (from a random start),
    each followed by the end-of-document id, until ``n`` tokens."""
    corpus = self.corpus if corpus == "train" else corpus
    eos = self.tokenizer.eos_id
    if corpus is None:
      parts, total = [], 0
      while total < n:
        doc = self._generated(rng, doc_len)
        parts += [doc, [eos]]
        total += len(doc) + 1
      return np.concatenate(parts)[:n].astype(np.int32)
    out = np.empty(n, np.int32)
    total = 0
    lengths = corpus.lengths
    while total < n:     # rounds of as many documents as the mean length says will fill the rest
      k = int((n - total) / (min(doc_len, corpus.mean_length) + 1)) + 1
      docs = rng.integers(len(corpus), size=k)
      starts = (rng.random(k) * np.maximum(1, lengths[docs] - doc_len)).astype(np.int64)
      for d, a in zip(docs.tolist(), starts.tolist()):
        piece = corpus.window(d, a, min(doc_len, n - total))
        out[total:total + len(piece)] = piece
        total += len(piece)
        if total < n:
          out[total] = eos
          total += 1
        if total >= n:
          break
    return out

  def _long_window(self, rng, n: int):
    """n tokens of one document, uniform over all such windows of the corpus's documents at
    least n long; None when the corpus has none."""
    if self._long_docs is None:
      docs = np.flatnonzero(self.corpus.lengths >= n)
      self._long_docs = (docs, np.cumsum(self.corpus.lengths[docs] - n + 1))
    docs, ends = self._long_docs
    if not len(docs):
      return None
    u = int(rng.integers(int(ends[-1])))
    i = int(np.searchsorted(ends, u, side="right"))
    start = u - (int(ends[i - 1]) if i else 0)
    return np.asarray(self.corpus.window(int(docs[i]), start, n), np.int32)

  # --- retrieval pairs --------------------------------------------------------------------

  def _units(self):
    """Every key (" abc:") and value ("10".."99") unit tokenized once, as (flat ids, offsets)
    of keys then values: a pair's tokens are two slices, whatever the tokenizer."""
    if self._pair_units is None:
      keys = [" " + "".join(chr(97 + k // 26 ** i % 26) for i in (2, 1, 0)) + ":"
              for k in range(26 ** 3)]
      toks, lengths = self.tokenizer.encode_units(keys + [str(v) for v in range(10, 100)])
      self._pair_units = (np.asarray(toks, np.int32),
                          np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
    return self._pair_units

  def _pair_tokens(self, rng):
    keys = rng.choice(26 ** 3, size=self.n_pairs, replace=False)
    values = rng.integers(10, 100, size=self.n_pairs)
    toks, at = self._units()
    out = []
    for k, v in zip(keys.tolist(), (26 ** 3 + values - 10).tolist()):
      key = toks[at[k]:at[k + 1]]
      out.append((np.concatenate([key, toks[at[v]:at[v + 1]]]), len(key)))
    return out

  def _insert_pairs(self, rng, tokens, answer):
    """Overwrite evidence/query copies of each pair at a sampled distance; mark the answers.

    All distances are drawn first and the longest placed first, while the row is emptiest:
    a distance is redrawn only when no placement fits it, which keeps the realised
    distances close to the configured law (checked by a KS test). A placement is uniform
    over the free ones: a few uniform candidates are tried first (pairs cover a small share
    of a row, so one nearly always fits), then every free start is listed."""
    n = len(tokens)
    pairs = self._pair_tokens(rng)
    lo, hi = max(self.min_distance, PAIR_CHARS), n - PAIR_CHARS
    if hi < lo:
      return []
    wanted = sample_distances(rng, self.distance, lo, hi, len(pairs))
    taken = np.zeros(n, bool)
    distances = []
    for i in np.argsort(wanted, kind="stable")[::-1]:
      pair, key_len = pairs[i]
      width, d = len(pair), int(wanted[i])
      for attempt in range(8):
        if attempt:
          d = sample_distance(rng, self.distance, lo, hi)
        a = _free_start(rng, taken, width, d)
        if a is not None:
          b = a + d
          tokens[a:a + width] = pair
          tokens[b:b + width] = pair
          taken[a:a + width] = taken[b:b + width] = True
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
    tokens = self._long_window(rng, n) if self.corpus is not None else None
    if tokens is None:
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
      self._validation_corpus = TokenIds(self.corpus_dir, self.tokenizer_spec, "validation")
    return self._validation_corpus

  def batch(self, step: int, rows: range | None = None) -> dict:
    rows = range(self.batch_size) if rows is None else rows
    tokens, answer, _ = zip(*(self.row(step, r) for r in rows))
    tokens, answer = np.stack(tokens), np.stack(answer)
    # answer_mask[i] marks the position whose target (token i+1) is an answer.
    return dict(inputs=tokens[:, :-1], targets=tokens[:, 1:], answer_mask=answer[:, 1:])


def _free_start(rng, taken, width: int, d: int, tries: int = 8):
  """A start a, uniform over those with [a, a+width) and [a+d, a+d+width) both free; None
  when there is none. Rejection first (exactly uniform over the free starts), then the list."""
  n = len(taken)
  span = n - width - d + 1
  if span <= 0:
    return None
  for a in (rng.random(tries) * span).astype(np.int64).tolist():
    if not (taken[a:a + width].any() or taken[a + d:a + d + width].any()):
      return a
  csum = np.concatenate([[0], np.cumsum(taken, dtype=np.int64)])
  busy = (csum[width:] - csum[:-width]) > 0          # busy[a]: [a, a+width) overlaps
  starts = np.flatnonzero(~busy[:span] & ~busy[d:n - width + 1])
  if not len(starts):
    return None
  return int(starts[rng.integers(len(starts))])
