"""The training mix's text path, as it was before corpora were tokenized once: kept only as
``hybrid-jax bench data``'s baseline, so the speed-up of the token-id path is measured
against it in the same run. Nothing trains on it."""

import numpy as np

from hybrid_jax.data import text as T
from hybrid_jax.data.corpus import open_corpus
from hybrid_jax.data.mix import PAIR_CHARS, TrainingMix, sample_distance


class TextMix(TrainingMix):
  """Rows as ``TrainingMix`` lays them out, but every row tokenizes corpus text (and its
  retrieval pairs) as it goes, and a long row packs random documents."""

  def __init__(self, data_cfg, *, batch_size: int, tokenizer=None):
    super().__init__(data_cfg, batch_size=batch_size, tokenizer=tokenizer,
                     corpus=open_corpus(data_cfg.corpus, "train") if data_cfg.corpus else None)

  def _long_window(self, rng, n: int):
    return None

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
