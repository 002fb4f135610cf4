"""The text corpus: documents from a source, written by a tensorflow-datasets builder as
array_record files (train/validation), read back with random access (no TensorFlow needed).

Sources (``hybrid-jax data build --source ...``, repeatable):
  python-docs   the reStructuredText sources of the Python documentation, as Debian's
                ``python3-doc`` package installs them (PSF License v2), markup and code stripped
  DIR           every ``.txt`` / ``.md`` file under a directory, one document per file
  tfds:NAME     a tensorflow-datasets catalog dataset (e.g. ``tfds:pg19``; needs its download)

A built directory holds ``corpus.json`` (its presence marks a complete build), the tfds
builder directory, the byte tokenizer's ids (``tokens/byte/``; ``hybrid-jax data tokenize``
adds those of a trained tokenizer: ``hybrid_jax.data.token_ids``), and optionally
``tokenizer.model`` / ``tokenizer.json``. The split of a document is a
hash of its id, so adding documents never moves the others between splits.
"""

import contextlib
import glob
import hashlib
import io
import itertools
import json
import os
import shutil
import tempfile
from pathlib import Path

from hybrid_jax.data import text as T
from hybrid_jax.data.rst import rst_to_text
from hybrid_jax.data.layout import MANIFEST, SPLITS, CorpusError  # noqa: F401  (corpus's names)
from hybrid_jax.data.token_ids import write_ids
from hybrid_jax.run import atomic_write_text

PYTHON_DOCS = "python-docs"
PYTHON_DOCS_GLOB = "/usr/share/doc/python3*/html/_sources"   # Debian's python3-doc layout
PYTHON_DOCS_INSTALL = "apt-get install python3-doc"
BUILDER_NAME = "text_corpus"
TEXT_SUFFIXES = (".txt", ".md")


# --- sources: iterables of (doc_id, text) -------------------------------------------------

def python_docs_dir() -> Path:
  found = sorted(glob.glob(PYTHON_DOCS_GLOB),
                 key=lambda p: [int(x) for x in Path(p).parent.parent.name[6:].split(".") if x.isdigit()])
  if not found:
    raise CorpusError(f"source python-docs: the Python documentation sources are not installed "
                      f"(install them with: {PYTHON_DOCS_INSTALL})")
  return Path(found[-1])


def python_docs_documents():
  root = python_docs_dir()
  for path in sorted(root.rglob("*.rst.txt")):
    text = T.clean_document(rst_to_text(path.read_text(encoding="utf-8", errors="replace")))
    if len(text) >= 200:
      yield f"{PYTHON_DOCS}/{path.relative_to(root)}", text


def read_text_file(path: Path) -> str | None:
  """The file's text, or None when it is not UTF-8 text (binary bytes, a NUL): such a file
  named .txt would otherwise train the model on noise."""
  data = path.read_bytes()
  if b"\0" in data:
    return None
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError:
    return None


def scan_directory(root: Path) -> tuple[list[Path], list[Path], list[Path], int]:
  """(text files, .txt/.md files that are not text, .txt/.md files without text (empty or
  blank), files with other suffixes)."""
  files = sorted(p for p in root.rglob("*") if p.is_file())
  named = [p for p in files if p.suffix.lower() in TEXT_SUFFIXES]
  text, binary, empty = [], [], []
  for p in named:
    raw = read_text_file(p)
    (binary if raw is None else empty if not T.clean_document(raw) else text).append(p)
  return text, binary, empty, len(files) - len(named)


def directory_documents(root: Path):
  """(id, text) of every .txt/.md file under ``root`` holding text; binary and empty ones are
  skipped (``build`` reports how many)."""
  for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES):
    raw = read_text_file(path)
    text = T.clean_document(raw) if raw is not None else ""
    if text:
      yield str(path.relative_to(root)), text


def check_source(source: str):
  """One-line errors before anything is written."""
  if source == PYTHON_DOCS:
    python_docs_dir()
  elif source.startswith("tfds:"):
    if not source[5:]:
      raise CorpusError("source tfds:NAME: the dataset name is empty")
  else:
    root = Path(source)
    if not root.is_dir():
      raise CorpusError(f"source {source}: not a directory, {PYTHON_DOCS!r} or tfds:NAME")
    if next(directory_documents(root), None) is None:
      _, binary, empty, other = scan_directory(root)
      raise CorpusError(f"source {source}: no non-empty {'/'.join(TEXT_SUFFIXES)} text files "
                        f"({len(binary)} {'/'.join(TEXT_SUFFIXES)} files are not UTF-8 text, "
                        f"{len(empty)} are empty, {other} files have other suffixes)")


def documents(source: str):
  if source == PYTHON_DOCS:
    return python_docs_documents()
  return directory_documents(Path(source))


def split_of(doc_id: str, validation_fraction: float) -> str:
  h = int.from_bytes(hashlib.sha256(doc_id.encode()).digest()[:8], "big") / 2.0 ** 64
  return "validation" if h < validation_fraction else "train"


# --- the tfds builder -----------------------------------------------------------------------

def _builder_class():
  import tensorflow_datasets as tfds   # lazy: optional heavy dependency, only corpus building and reading need it

  class TextCorpus(tfds.core.GeneratorBasedBuilder):
    """Documents with a text feature, in their source order (no shuffling)."""
    VERSION = tfds.core.Version("1.0.0")

    def __init__(self, *, docs_by_split, description, **kwargs):
      self._docs_by_split = docs_by_split
      self._description = description
      super().__init__(**kwargs)

    def _info(self):
      return tfds.core.DatasetInfo(
          builder=self, description=self._description, disable_shuffling=True,
          features=tfds.features.FeaturesDict({"id": tfds.features.Text(),
                                               "text": tfds.features.Text()}))

    def _split_generators(self, dl_manager):
      return {split: self._generate_examples(docs) for split, docs in self._docs_by_split.items()}

    def _generate_examples(self, docs):
      for i, (doc_id, text) in enumerate(docs):
        yield i, {"id": doc_id, "text": text}

  TextCorpus.name = BUILDER_NAME
  return TextCorpus


_BUILDER = None


def _builder(**kwargs):
  global _BUILDER
  if _BUILDER is None:
    _BUILDER = _builder_class()
  return _BUILDER(**kwargs)


def _check_out(out: Path):
  if out.exists() and (not out.is_dir() or any(out.iterdir())):
    raise CorpusError(f"out {out}: exists and is not empty (results are never overwritten; "
                      "choose a new directory)")


def build(sources: list[str], out, *, validation_fraction: float = 0.05,
          max_documents: int | None = None, quiet: bool = True) -> dict:
  """Build ``out`` from the sources; every check runs before anything is written, and the
  build happens in a temporary sibling directory renamed into place at the end."""
  out = Path(out)
  if not sources:
    raise CorpusError("source: give at least one")
  if not 0.0 < validation_fraction < 1.0:
    raise CorpusError(f"--validation-fraction: must be in (0, 1) (got {validation_fraction})")
  for s in sources:
    check_source(s)
  _check_out(out)
  if any(s.startswith("tfds:") for s in sources):
    if len(sources) > 1:
      raise CorpusError("source tfds:NAME: cannot be combined with other sources")
    return _build_catalog(sources[0][5:], out, quiet=quiet)

  docs = {split: [] for split in SPLITS}
  n = 0
  all_docs = itertools.chain.from_iterable(documents(s) for s in sources)
  for doc_id, text in itertools.islice(all_docs, max_documents or None):
    docs[split_of(doc_id, validation_fraction)].append((doc_id, text))
    n += 1
  if not docs["train"] or not docs["validation"]:
    raise CorpusError(f"source: {n} document(s) do not fill both splits at --validation-fraction "
                      f"{validation_fraction} (the share held out for validation); add text"
                      f"{', raise --max-documents' if max_documents else ''} or change "
                      "--validation-fraction")
  tmp = out.parent / f".{out.name}.building{os.getpid()}"
  shutil.rmtree(tmp, ignore_errors=True)
  try:
    with _tfds_temp_dirs_in(tmp):
      builder = _builder(docs_by_split=docs, description=f"hybrid_jax text corpus from {sources}",
                         data_dir=str(tmp), file_format="array_record")
    _prepare(builder, quiet)
    manifest = dict(sources=sources, builder_dir=os.path.relpath(builder.data_dir, tmp),
                    text_feature="text", validation_fraction=validation_fraction,
                    documents={k: len(v) for k, v in docs.items()},
                    characters={k: sum(len(t) for _, t in v) for k, v in docs.items()},
                    license=_license(sources), **_skipped_files(sources))
    shutil.rmtree(tmp / "downloads", ignore_errors=True)   # tfds makes it; nothing is downloaded
    atomic_write_text(tmp / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    # byte ids need no trained tokenizer: a built corpus trains at once
    write_ids(tmp, None, {k: (t for _, t in v) for k, v in docs.items()})
    if out.exists():
      out.rmdir()          # empty (checked above)
    os.replace(tmp, out)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return manifest


def _skipped_files(sources) -> dict:
  """The .txt/.md files of the directory sources that hold no document: not UTF-8 text, or
  empty (counted over whole sources, like the manifest's sources)."""
  scans = [scan_directory(Path(s)) for s in sources if s != PYTHON_DOCS]
  return dict(skipped_non_text_files=sum(len(s[1]) for s in scans),
              skipped_empty_files=sum(len(s[2]) for s in scans))


def _license(sources):
  return "; ".join("PSF License Version 2 (Python documentation)" if s == PYTHON_DOCS
                   else f"{s}: as its files" for s in sources)


@contextlib.contextmanager
def _tfds_temp_dirs_in(folder: Path):
  """A new tfds builder makes an (empty) temporary directory; keep it in ours, then drop it."""
  folder.mkdir(parents=True, exist_ok=True)
  old, tempfile.tempdir = tempfile.tempdir, str(folder)
  try:
    yield
  finally:
    tempfile.tempdir = old
    for d in folder.glob("tmp*tfds"):
      shutil.rmtree(d, ignore_errors=True)


def _prepare(builder, quiet):

  import tensorflow_datasets as tfds   # lazy: optional heavy dependency, only corpus building and reading need it
  if not quiet:
    return builder.download_and_prepare()
  tfds.disable_progress_bar()
  with contextlib.redirect_stdout(io.StringIO()):   # tfds prints its own progress lines
    builder.download_and_prepare()


def _build_catalog(name, out, *, quiet):
  """A tfds catalog dataset (c4, pg19, ...) prepared as array_record under ``out``."""
  import tensorflow_datasets as tfds   # lazy: optional heavy dependency, only corpus building and reading need it
  tmp = out.parent / f".{out.name}.building{os.getpid()}"
  shutil.rmtree(tmp, ignore_errors=True)
  try:
    try:
      with _tfds_temp_dirs_in(tmp):
        builder = tfds.builder(name, data_dir=str(tmp), file_format="array_record")
      _prepare(builder, quiet)
    except Exception as e:  # offline, unknown name, missing extras: say so in one line
      msg = " ".join(str(e).split())[:300]
      raise CorpusError(f"source tfds:{name}: cannot build ({type(e).__name__}: {msg})") from None
    features = builder.info.features
    text_feature = next((k for k in ("text", "book_text", "article", "document") if k in features),
                        None)
    if text_feature is None:
      raise CorpusError(f"source tfds:{name}: has no text feature (features: {list(features)})")
    splits = dict(train="train", validation="validation" if "validation" in builder.info.splits
                  else "test")
    manifest = dict(sources=[f"tfds:{name}"], builder_dir=os.path.relpath(builder.data_dir, tmp),
                    text_feature=text_feature, splits=splits,
                    documents={k: builder.info.splits[v].num_examples for k, v in splits.items()},
                    license=f"see the tfds catalog page of {name}")
    atomic_write_text(tmp / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    if out.exists():
      out.rmdir()
    os.replace(tmp, out)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return manifest


# --- reading --------------------------------------------------------------------------------

def read_manifest(data_dir) -> dict:
  path = Path(data_dir) / MANIFEST
  if not path.is_file():
    raise CorpusError(f"corpus {data_dir}: not a built corpus (no {MANIFEST}; build one with "
                      "hybrid-jax data build)")
  try:
    return json.loads(path.read_text())
  except ValueError as e:
    raise CorpusError(f"corpus {data_dir}: unreadable {MANIFEST} ({e})") from None


class TextCorpus:
  """Random access to one split: ``len(corpus)``, ``corpus[i] -> str``, ``corpus.id(i)``."""

  def __init__(self, data_dir, split: str = "train"):
    if split not in SPLITS:
      raise CorpusError(f"split: must be one of {SPLITS} (got {split!r})")
    manifest = read_manifest(data_dir)
    import tensorflow_datasets as tfds   # lazy: optional heavy dependency, only corpus building and reading need it
    try:
      builder = tfds.builder_from_directory(str(Path(data_dir) / manifest["builder_dir"]))
      self.source = builder.as_data_source(split=manifest.get("splits", {}).get(split, split))
    except Exception as e:
      raise CorpusError(f"corpus {data_dir}: cannot open split {split} ({type(e).__name__}: "
                        f"{' '.join(str(e).split())[:200]})") from None
    self.text_feature = manifest["text_feature"]
    self.data_dir, self.split = Path(data_dir), split

  def __len__(self) -> int:
    return len(self.source)

  def record(self, i: int) -> dict:
    if not -len(self) <= i < len(self):
      raise IndexError(f"document {i} out of range for {len(self)} documents")
    return self.source[int(i)]

  def __getitem__(self, i: int) -> str:
    value = self.record(i)[self.text_feature]
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)

  def id(self, i: int) -> str:
    value = self.record(i).get("id", str(i))
    return value.decode() if isinstance(value, bytes) else str(value)


def open_corpus(data_dir, split: str = "train") -> TextCorpus:
  return TextCorpus(data_dir, split)


def tokenize(data_dir, spec: str | None = None, *, threads: int | None = None) -> dict:
  """``hybrid-jax data tokenize``: write ``data_dir``'s token ids for tokenizer ``spec``
  (``hybrid_jax.data.token_ids``), reading each split's documents in order."""
  read_manifest(data_dir)                          # a one-line error for a non-corpus
  texts = {split: _texts(open_corpus(data_dir, split)) for split in SPLITS}
  return write_ids(data_dir, spec, texts, threads=threads)


def _texts(corpus):
  for i in range(len(corpus)):
    yield corpus[i]
