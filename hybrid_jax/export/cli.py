"""``hybrid-jax export hf --workdir RUN [--step S] --out DIR``: a run's checkpoint as a
Hugging Face directory (``AutoModelForCausalLM`` / ``AutoTokenizer``, no custom code).

Errors are one line, found before anything is written; DIR is never overwritten.
"""

import argparse
import sys

PROG = "hybrid-jax export"


def _die(message: str, code: int = 2):
  print(f"{PROG}: error: {' '.join(str(message).split())}", file=sys.stderr)
  raise SystemExit(code)


class _Parser(argparse.ArgumentParser):
  def error(self, message):
    _die(message)


def main(argv=None) -> int:
  p = _Parser(prog=PROG, description=__doc__.splitlines()[0])
  sub = p.add_subparsers(dest="format", parser_class=_Parser, required=True)
  h = sub.add_parser("hf", help="Hugging Face transformers directory (safetensors)")
  h.add_argument("--workdir", required=True, help="the run directory")
  h.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
  h.add_argument("--out", required=True, help="new (or empty) directory to write")
  h.add_argument("--max-length", type=int, default=None,
                 help="max_position_embeddings (default: the longest of data.seq_len, eval.lengths)")
  args = p.parse_args(sys.argv[1:] if argv is None else argv)
  from hybrid_jax.export.hf import export_hf
  from hybrid_jax.eval.checkpoints import EvalInputError
  try:
    out = export_hf(args.workdir, args.out, step=args.step, max_len=args.max_length)
  except (EvalInputError, ValueError, OSError) as e:
    _die(e)
  import json
  cls = json.loads((out / "config.json").read_text())["architectures"][0]
  print(f"{PROG}: wrote {out} ({cls}); load it with "
        f"transformers.AutoModelForCausalLM.from_pretrained({str(out)!r})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
