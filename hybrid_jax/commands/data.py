"""``hybrid-jax data``: build a text corpus, train a tokenizer on it, show examples.

  hybrid-jax data build --source python-docs --out data/pydocs
  hybrid-jax data build --source my_texts/ --out data/mine          (any .txt/.md directory)
  hybrid-jax data build --source tfds:pg19 --out data/pg19          (needs its download)
  hybrid-jax data tokenizer --data data/pydocs --vocab-size 4096    (data/pydocs/tokenizer.model)
  hybrid-jax data tokenizer train --corpus data/pydocs --vocab-size 32000  (BPE tokenizer.json)
  hybrid-jax data tokenize --data data/pydocs --tokenizer data/pydocs      (its token ids, once)
  hybrid-jax data show niah_single_prose --length 512 --depth 0.5 --data data/pydocs
  hybrid-jax data show mix --seq-len 256 --step 0 --row 0 --batch-size 8
  hybrid-jax data show corpus --data data/pydocs --split validation --index 3

Every error is one line, found before anything is written; nothing existing is overwritten.
"""

import sys
import time
from pathlib import Path

from hybrid_jax.cli_args import ArgumentParser
from hybrid_jax.configs.base import base_config
from hybrid_jax.data import tasks
from hybrid_jax.data.corpus import build, open_corpus, tokenize
from hybrid_jax.data.mix import TrainingMix, max_pairs
from hybrid_jax.data.token_ids import ids_dir
from hybrid_jax.data.tokenizer import SENTENCEPIECE_FILE, load_tokenizer, train_sentencepiece
from hybrid_jax.commands.data_tokenizer import main as bpe_main
from hybrid_jax.errors import UserError

PROG = "hybrid-jax data"
ANSWER_MARKS, EVIDENCE_MARKS = ("[[", "]]"), ("<<", ">>")




def _parser():
  p = ArgumentParser(prog=PROG, description="Build a text corpus, train a tokenizer on it, or show "
                     "examples.", epilog=__doc__.split("\n", 2)[2])
  sub = p.add_subparsers(dest="command", required=True)
  b = sub.add_parser("build", help="build a corpus directory (tfds, array_record)")
  b.add_argument("--source", action="append", required=True,
                 help="python-docs, a directory of .txt/.md files, or tfds:NAME (repeatable)")
  b.add_argument("--out", required=True, help="new (or empty) directory to build into")
  b.add_argument("--validation-fraction", type=float, default=0.05,
                 help="share of the documents held out as the validation split (by a hash of "
                 "each document's id, so a rebuild splits alike)")
  b.add_argument("--max-documents", type=int, default=None,
                 help="build from the first N documents of the sources only (default: all)")
  t = sub.add_parser("tokenizer", help="train a sentencepiece model on a built corpus "
                     "(tokenizer train: a BPE tokenizer.json)",
                     epilog="subcommands:\n  train  train a byte-level BPE tokenizer.json instead "
                     "(hybrid-jax data tokenizer train --help)")
  t.add_argument("--data", required=True, help="a directory built by `data build`")
  t.add_argument("--vocab-size", type=int, default=4096, help="the vocabulary size to learn")
  t.add_argument("--model-type", choices=("bpe", "unigram"), default="bpe",
                 help="sentencepiece's model type")
  t.add_argument("--max-documents", type=int, default=None,
                 help="train on the first N documents only (default: all)")
  k = sub.add_parser("tokenize", help="tokenize a built corpus once: the token ids training reads")
  k.add_argument("--data", required=True, help="a directory built by `data build`")
  k.add_argument("--tokenizer", required=True,
                 help="'byte', a tokenizer.json / sentencepiece model, or a directory holding one")
  k.add_argument("--threads", type=int, default=None,
                 help="encoding threads (default: every core)")
  s = sub.add_parser("show", help="print a decoded task example, mix row or corpus document")
  s.add_argument("what", help="a task name, 'mix' or 'corpus'")
  s.add_argument("--data", default="", help="corpus directory (prose haystacks, mix text) "
                 "(default: none: generated prose)")
  s.add_argument("--tokenizer", default="byte", help="'byte' or a sentencepiece model / data dir")
  s.add_argument("--length", type=int, default=512, help="task: example length in tokens")
  s.add_argument("--depth", type=float, default=0.5,
                 help="task: where the needle sits, 0 (start) to 1 (end) of the context")
  s.add_argument("--seed", type=int, default=0, help="task / mix: the data seed")
  s.add_argument("--index", type=int, default=0, help="task example / corpus document index")
  s.add_argument("--n-classes", type=int, default=0,
                 help="task: draw the answer from this many fixed values, the probes' closed set "
                 "(0: any number)")
  s.add_argument("--seq-len", type=int, default=256, help="mix: row length")
  s.add_argument("--step", type=int, default=0, help="mix: the training step")
  s.add_argument("--row", type=int, default=0, help="mix: the row of that step's batch")
  s.add_argument("--batch-size", type=int, default=8,
                 help="mix: the run's train.batch_size (which rows are long depends on it)")
  s.add_argument("--long-fraction", type=float, default=0.5,
                 help="mix: the run's data.long_fraction (share of long retrieval rows)")
  s.add_argument("--n-pairs", type=int, default=None, help="mix: pairs per long row "
                 "(default: data.n_pairs, at most seq_len/28)")
  s.add_argument("--split", default="validation", help="corpus/tasks: split of --data")
  return p


def cmd_build(args):
  m = build(args.source, args.out, validation_fraction=args.validation_fraction,
            max_documents=args.max_documents)
  docs, chars = m["documents"], m.get("characters", {})
  print(f"{PROG}: built {args.out}: " + ", ".join(
      f"{k} {docs[k]} documents" + (f" ({chars[k] / 1e6:.2f}M characters)" if k in chars else "")
      for k in docs) + f"; license: {m['license']}"
        + (f"; skipped {m['skipped_non_text_files']} .txt/.md files that are not UTF-8 text"
           if m.get("skipped_non_text_files") else "")
        + (f"; skipped {m['skipped_empty_files']} empty .txt/.md files"
           if m.get("skipped_empty_files") else ""))


def cmd_tokenizer(args):
  out = Path(args.data) / SENTENCEPIECE_FILE
  if out.exists():
    raise UserError(f"{out} exists (never overwritten; delete it to retrain)")
  if not 300 <= args.vocab_size <= 1_000_000:
    raise UserError(f"--vocab-size: must be in [300, 1000000] (byte fallback needs 256 ids) (got {args.vocab_size})")
  corpus = open_corpus(args.data, "train")
  n = len(corpus) if args.max_documents is None else min(len(corpus), args.max_documents)
  try:
    path = train_sentencepiece((corpus[i] for i in range(n)), args.data, vocab_size=args.vocab_size,
                               model_type=args.model_type)
  except RuntimeError as e:   # e.g. a vocabulary larger than the text supports
    raise UserError(f"sentencepiece: {e}")
  print(f"{PROG}: wrote {path} (vocab_size {load_tokenizer(str(path)).vocab_size}); use it with "
        f"--config.data.tokenizer={args.data} --config.model.vocab_size=N (N >= vocab_size)")


def cmd_tokenize(args):
  if args.threads is not None and args.threads < 1:
    raise UserError(f"--threads: must be >= 1 (got {args.threads})")
  t0 = time.perf_counter()
  meta = tokenize(args.data, args.tokenizer, threads=args.threads)
  n = meta["splits"]
  print(f"{PROG}: wrote {ids_dir(args.data, args.tokenizer)}: " + ", ".join(
      f"{k} {v['documents']} documents, {v['tokens'] / 1e6:.2f}M tokens" for k, v in n.items())
        + f" ({time.perf_counter() - t0:.1f} s); train with --config.data.corpus={args.data} "
        f"--config.data.tokenizer={args.tokenizer}")


def marked_text(tokenizer, tokens, answer, evidence=None) -> str:
  """Decoded tokens with answers in [[...]] and evidence in <<...>>."""
  evidence = [False] * len(tokens) if evidence is None else evidence
  kinds = [2 if a else 1 if e else 0 for a, e in zip(answer, evidence)]
  out, start = [], 0
  for i in range(1, len(tokens) + 1):
    if i == len(tokens) or kinds[i] != kinds[start]:
      text = tokenizer.decode(tokens[start:i])
      marks = {2: ANSWER_MARKS, 1: EVIDENCE_MARKS}.get(kinds[start], ("", ""))
      out.append(marks[0] + text + marks[1])
      start = i
  return "".join(out)


def _show_task(args, tokenizer):
  corpus = None
  if args.data:
    corpus = open_corpus(args.data, args.split)
  ex = tasks.make_example(args.what, length=args.length, depth=args.depth, seed=args.seed,
                          index=args.index, tokenizer=tokenizer, corpus=corpus,
                          n_classes=args.n_classes)
  answer = [False] * len(ex.tokens)
  evidence = [False] * len(ex.tokens)
  for p in ex.answer_positions:
    answer[p] = True
  for p in ex.evidence_positions:
    evidence[p] = True
  print(f"# {args.what}: {len(ex.tokens)} tokens, depth {ex.depth}, answer class {ex.answer_class}, "
        f"answer {tokenizer.decode(ex.tokens[ex.answer_positions])!r} at "
        f"{ex.answer_positions.tolist()}, evidence at {ex.evidence_positions.tolist()}")
  print(marked_text(tokenizer, ex.tokens, answer, evidence))


def _show_mix(args, tokenizer):
  d = base_config().data
  d.name, d.seq_len, d.seed, d.corpus = "mix", args.seq_len, args.seed, args.data
  d.tokenizer = args.tokenizer
  d.long_fraction = args.long_fraction
  d.n_pairs = min(d.n_pairs, max_pairs(args.seq_len)) if args.n_pairs is None else args.n_pairs
  if not 0 <= d.n_pairs <= max_pairs(args.seq_len):
    raise UserError(f"--n-pairs: must be in [0, seq_len/28 = {max_pairs(args.seq_len)}] (got {d.n_pairs})")
  if not 0 <= args.row < args.batch_size:
    raise UserError(f"--row: must be in [0, --batch-size={args.batch_size}) (got {args.row})")
  src = TrainingMix(d, batch_size=args.batch_size, tokenizer=tokenizer)
  tokens, answer, distances = src.row(args.step, args.row)
  kind = "long" if src.is_long(args.step, args.row) else "short"
  print(f"# mix row {args.row} of step {args.step}: {kind}, {len(tokens)} tokens (inputs and the "
        f"last target), {int(answer.sum())} answer tokens, query-to-evidence distances {distances}")
  print(marked_text(tokenizer, tokens, answer))


def _show_corpus(args):
  if not args.data:
    raise UserError("show corpus: --data is required")
  corpus = open_corpus(args.data, args.split)
  if not 0 <= args.index < len(corpus):
    raise UserError(f"--index: {args.index} out of range ({len(corpus)} {args.split} documents)")
  print(f"# {args.data} {args.split} document {args.index} of {len(corpus)}: {corpus.id(args.index)}")
  print(corpus[args.index])


def cmd_show(args):
  if args.what == "corpus":
    return _show_corpus(args)
  if args.what != "mix" and args.what not in tasks.TASK_NAMES:
    raise UserError(f"show: unknown {args.what!r} (a task: {', '.join(tasks.TASK_NAMES)}; or mix, corpus)")
  tokenizer = load_tokenizer(args.tokenizer)
  if args.what == "mix":
    return _show_mix(args, tokenizer)
  return _show_task(args, tokenizer)


COMMANDS = {"build": cmd_build, "tokenizer": cmd_tokenizer, "tokenize": cmd_tokenize,
            "show": cmd_show}
# Subcommands of a subcommand, dispatched before parsing: `tokenizer --data ...` keeps its
# flags while `tokenizer train` trains the byte-level BPE (tokenizer.json).
NESTED = {("tokenizer", "train"): bpe_main}


def main(argv=None):
  argv = sys.argv[1:] if argv is None else list(argv)
  if tuple(argv[:2]) in NESTED:
    return NESTED[tuple(argv[:2])](argv[2:])
  parser = _parser()
  if not argv or argv[0] in ("-h", "--help"):
    parser.print_help()
    return 0 if argv else 2
  args = parser.parse_args(argv)
  try:
    COMMANDS[args.command](args)
  except BrokenPipeError:   # output piped into head & co.
    sys.stderr.close()
    return 0
  except UserError:
    raise
  except (ValueError, IndexError, OSError) as e:   # bad task arguments, files
    raise UserError(f"{args.command}: {e}") from None
  return 0


if __name__ == "__main__":
  sys.exit(main())
