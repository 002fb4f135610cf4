"""``hybrid-jax data tokenizer train``: a byte-level BPE (Hugging Face ``tokenizer.json``)
trained on a corpus built by ``hybrid-jax data build``, stored in that directory.

  hybrid-jax data tokenizer train --corpus data/pydocs --vocab-size 32000
  hybrid-jax train ... --config.data.tokenizer=data/pydocs --config.model.vocab_size=None

(``model.vocab_size=None`` takes the tokenizer's vocabulary.) Errors are one line, found
before anything is written; an existing tokenizer.json is never overwritten.
"""

import sys
from pathlib import Path

from hybrid_jax.cli_args import ArgumentParser
from hybrid_jax.data.corpus import open_corpus
from hybrid_jax.data.tokenizer import HF_FILE, load_tokenizer, train_bpe
from hybrid_jax.errors import UserError

PROG = "hybrid-jax data tokenizer train"
MIN_VOCAB = 257            # the 256 bytes plus <|endoftext|>


def main(argv=None) -> int:
  p = ArgumentParser(prog=PROG, description="Train a byte-level BPE tokenizer.json on a built corpus.",
                     epilog=__doc__.split("\n", 2)[2])
  p.add_argument("--corpus", required=True, help="a directory built by `hybrid-jax data build`")
  p.add_argument("--vocab-size", type=int, default=32000, help="the vocabulary size to learn")
  p.add_argument("--max-documents", type=int, default=None,
                 help="train on the first N documents only (default: all)")
  args = p.parse_args(sys.argv[1:] if argv is None else argv)
  out = Path(args.corpus) / HF_FILE
  if not MIN_VOCAB <= args.vocab_size <= 1_000_000:
    raise UserError(f"tokenizer train: --vocab-size: must be in [{MIN_VOCAB}, 1000000] (every byte plus <|endoftext|>) "
         f"(got {args.vocab_size})")
  if out.exists():
    raise UserError(f"tokenizer train: {out} exists (never overwritten; delete it to retrain)")
  try:
    corpus = open_corpus(args.corpus, "train")
  except (ValueError, OSError) as e:
    raise UserError(f"tokenizer train: {e}") from None
  n = len(corpus) if args.max_documents is None else min(len(corpus), args.max_documents)
  path = train_bpe((corpus[i] for i in range(n)), args.corpus, vocab_size=args.vocab_size)
  print(f"{PROG}: wrote {path} (vocab_size {load_tokenizer(str(path)).vocab_size}); use it with "
        f"--config.data.tokenizer={args.corpus} --config.model.vocab_size=None")
  return 0


if __name__ == "__main__":
  sys.exit(main())
