"""``hybrid-jax export hf --workdir RUN [--step S] --out DIR``: a run's checkpoint as a
Hugging Face directory (``AutoModelForCausalLM`` / ``AutoTokenizer``, no custom code).

Errors are one line, found before anything is written; DIR is never overwritten.
"""

import json
import sys

from hybrid_jax.cli_args import ArgumentParser
from hybrid_jax.errors import UserError

PROG = "hybrid-jax export"


def main(argv=None) -> int:
  p = ArgumentParser(prog=PROG, description="Write a run's checkpoint in another library's format.")
  sub = p.add_subparsers(dest="format", required=True)
  h = sub.add_parser("hf", help="write a Hugging Face transformers directory (safetensors)")
  h.add_argument("--workdir", required=True, help="the run directory")
  h.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
  h.add_argument("--out", required=True, help="new (or empty) directory to write")
  h.add_argument("--max-length", type=int, default=None,
                 help="max_position_embeddings (default: the longest of data.seq_len, eval.lengths)")
  args = p.parse_args(sys.argv[1:] if argv is None else argv)
  try:
    from hybrid_jax.export.hf import export_hf   # lazy: JAX, seconds; --help stays instant
    out = export_hf(args.workdir, args.out, step=args.step, max_len=args.max_length)
  except UserError:
    raise
  except (ValueError, OSError) as e:
    raise UserError(f"export hf: {e}") from None
  cls = json.loads((out / "config.json").read_text())["architectures"][0]
  print(f"{PROG}: wrote {out} ({cls}); load it with "
        f"transformers.AutoModelForCausalLM.from_pretrained({str(out)!r})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
