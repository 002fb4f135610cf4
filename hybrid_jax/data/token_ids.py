"""A corpus tokenized once: token ids with document boundaries, read with random access.

``hybrid-jax data tokenize --data DIR --tokenizer T`` writes ``DIR/tokens/<fingerprint>/``:

  train.ids, validation.ids          every document's ids back to back (uint8, uint16 or
                                     uint32: the smallest that holds the vocabulary)
  train.offsets, validation.offsets  int64 [documents + 1]: document d is ids[o[d]:o[d+1]]
  ids.json                           written last (its presence marks a complete directory):
                                     the tokenizer, its fingerprint, vocabulary, eos id, dtype,
                                     the corpus manifest's hash and per-split counts

The fingerprint is the tokenizer file's sha256 (``byte`` for the byte tokenizer), so ids
made by another tokenizer, or by this one before it was retrained, are never read as this
one's. Files are memory-mapped: a window of a huge document costs what a window of a small
one does, and a grain worker process opens its own maps. The ids take at most the bytes of
int32 ids plus 8 bytes a document.
"""

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np

from hybrid_jax.data.layout import MANIFEST, SPLITS, TOKENS_DIR, CorpusError
from hybrid_jax.data.tokenizer import BYTE, load_tokenizer, tokenizer_file
from hybrid_jax.run import atomic_write_text

META = "ids.json"
FORMAT = 1
CHUNK_CHARS = 8 << 20            # text encoded per batch call (bounded memory, many cores busy)


def tokenizer_fingerprint(spec: str | None) -> str:
  """``byte``, or the first 16 hex digits of the tokenizer file's sha256."""
  path = tokenizer_file(spec)
  if path is None:
    return BYTE
  return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def ids_dir(data_dir, spec) -> Path:
  return Path(data_dir) / TOKENS_DIR / tokenizer_fingerprint(spec)


def tokenize_command(data_dir, spec) -> str:
  return f"hybrid-jax data tokenize --data {data_dir} --tokenizer {spec or BYTE}"


def _manifest_hash(data_dir) -> str:
  return hashlib.sha256((Path(data_dir) / MANIFEST).read_bytes()).hexdigest()[:16]


def check_ids(data_dir, spec) -> dict:
  """The ids metadata of ``data_dir`` for tokenizer ``spec``, or a one-line CorpusError that
  names the command making them (none there, ids of other tokenizers only, or ids whose
  record says another tokenizer or another build of the corpus made them)."""
  want = tokenizer_fingerprint(spec)
  root = Path(data_dir) / TOKENS_DIR
  meta_path = root / want / META
  make = tokenize_command(data_dir, spec)
  if not meta_path.is_file():
    others = sorted(p.parent.name for p in root.glob(f"*/{META}"))
    have = (f"it has ids of other tokenizers only (fingerprints {', '.join(others)}), not of "
            f"{spec or BYTE} ({want})" if others else f"it has no token ids for tokenizer {spec or BYTE}")
    raise CorpusError(f"data.corpus {data_dir}: {have}; make them with: {make}")
  try:
    meta = json.loads(meta_path.read_text())
  except ValueError as e:
    raise CorpusError(f"data.corpus {data_dir}: unreadable {meta_path} ({e}); remove "
                      f"{meta_path.parent} and make them again with: {make}") from None
  if meta.get("fingerprint") != want:
    raise CorpusError(f"data.corpus {data_dir}: the ids in {meta_path.parent} were made by another "
                      f"tokenizer (fingerprint {meta.get('fingerprint')}, not {want}); remove that "
                      f"directory and make them with: {make}")
  if meta.get("corpus") != _manifest_hash(data_dir):
    raise CorpusError(f"data.corpus {data_dir}: the ids in {meta_path.parent} were made from another "
                      f"build of the corpus; remove that directory and make them with: {make}")
  return meta


class TokenIds:
  """One split's ids: ``len()`` documents, ``lengths`` [docs] int64, ``doc(i)`` (a view),
  ``window(i, start, n)``; ``eos_id`` and ``vocab_size`` of the tokenizer that made them."""

  def __init__(self, data_dir, spec, split: str = "train"):
    if split not in SPLITS:
      raise CorpusError(f"split: must be one of {SPLITS} (got {split!r})")
    meta = check_ids(data_dir, spec)
    folder = ids_dir(data_dir, spec)
    self.eos_id, self.vocab_size = int(meta["eos_id"]), int(meta["vocab_size"])
    self.split, self.data_dir = split, Path(data_dir)
    n = meta["splits"][split]
    self.offsets = np.fromfile(folder / f"{split}.offsets", np.int64)
    if len(self.offsets) != n["documents"] + 1 or self.offsets[-1] != n["tokens"]:
      raise CorpusError(f"data.corpus {data_dir}: {folder / (split + '.offsets')} does not match "
                        f"{META}; remove {folder} and run: {tokenize_command(data_dir, spec)}")
    self.ids = (np.memmap(folder / f"{split}.ids", np.dtype(meta["dtype"]), "r")
                if n["tokens"] else np.zeros(0, meta["dtype"]))
    if len(self.ids) != n["tokens"]:
      raise CorpusError(f"data.corpus {data_dir}: {folder / (split + '.ids')} holds {len(self.ids)} "
                        f"ids, {META} says {n['tokens']}; remove {folder} and run: "
                        f"{tokenize_command(data_dir, spec)}")
    self.lengths = np.diff(self.offsets)
    self.mean_length = float(self.lengths.mean()) if len(self.lengths) else 0.0

  def __len__(self) -> int:
    return len(self.lengths)

  def doc(self, i: int) -> np.ndarray:
    return self.ids[self.offsets[i]:self.offsets[i + 1]]

  def window(self, i: int, start: int, n: int) -> np.ndarray:
    a = self.offsets[i] + start
    return self.ids[a:min(a + n, self.offsets[i + 1])]


# --- writing ----------------------------------------------------------------------------------

def _encoder(tokenizer, threads: int):
  """texts -> list of id arrays, with the tokenizer library's own batch encoding (Rust
  threads for tokenizers, C++ threads for sentencepiece; bytes need none)."""
  if tokenizer.name == BYTE:
    return lambda texts: [np.frombuffer(t.encode("utf-8"), np.uint8) for t in texts]
  if hasattr(tokenizer, "tok"):     # HFTokenizer: encode_batch runs on every core (rayon)
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
    return lambda texts: [np.asarray(e.ids) for e in
                          tokenizer.tok.encode_batch(list(texts), add_special_tokens=False)]
  return lambda texts: [np.asarray(p) for p in tokenizer.sp.encode(list(texts), num_threads=threads)]


def _chunks(texts):
  batch, size = [], 0
  for text in texts:
    batch.append(text)
    size += len(text)
    if size >= CHUNK_CHARS:
      yield batch
      batch, size = [], 0
  if batch:
    yield batch


def write_ids(data_dir, spec, texts_by_split: dict, *, threads: int | None = None) -> dict:
  """Write ``data_dir``'s ids for tokenizer ``spec`` from each split's document texts, in
  the corpus's order (see the module docstring); returns the metadata. Existing ids are never
  overwritten: the work happens in a temporary sibling renamed into place once complete."""
  data_dir = Path(data_dir)
  try:
    tokenizer = load_tokenizer(spec)
  except ValueError as e:
    raise CorpusError(f"--tokenizer: {e}") from None
  fingerprint = tokenizer_fingerprint(spec)
  out = data_dir / TOKENS_DIR / fingerprint
  if (out / META).is_file():
    raise CorpusError(f"{out}: ids for this tokenizer exist (never overwritten; remove the directory "
                      "to make them again)")
  dtype = np.dtype("u1" if tokenizer.vocab_size <= 256 else "<u2" if tokenizer.vocab_size <= 1 << 16
                   else "<u4")
  threads = threads or os.cpu_count() or 1
  encode = _encoder(tokenizer, threads)
  tmp = out.parent / f".{fingerprint}.making{os.getpid()}"
  shutil.rmtree(tmp, ignore_errors=True)
  tmp.mkdir(parents=True)
  splits = {}
  try:
    for split in SPLITS:
      lengths = []
      with open(tmp / f"{split}.ids", "wb") as f:
        for texts in _chunks(texts_by_split[split]):
          for ids in encode(texts):
            f.write(np.asarray(ids).astype(dtype).tobytes())
            lengths.append(len(ids))
        f.flush()
        os.fsync(f.fileno())
      offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
      offsets.tofile(tmp / f"{split}.offsets")
      splits[split] = dict(documents=len(lengths), tokens=int(offsets[-1]),
                           longest=int(max(lengths, default=0)))
    meta = dict(format=FORMAT, tokenizer=str(spec or BYTE), fingerprint=fingerprint,
                vocab_size=int(tokenizer.vocab_size), eos_id=int(tokenizer.eos_id),
                dtype=dtype.str, corpus=_manifest_hash(data_dir), splits=splits)
    atomic_write_text(tmp / META, json.dumps(meta, indent=2) + "\n")
    if out.exists():
      shutil.rmtree(out)                           # an incomplete earlier directory (no ids.json)
    os.replace(tmp, out)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return meta
