"""``python -m hybrid_jax.bench.pilot``: a short paper-config run on the accelerator at hand,
recording what a plan can only predict: seconds per step, the share of it the loop waited for
input, and MFU (model FLOPs per second over the device's bf16 peak), beside ``plan``'s
roofline step for the same config when a plan record is given (``--plan``, from ``hybrid-jax
plan`` on any host: the deviceless compile needs no accelerator).

  python -m hybrid_jax.bench.pilot --corpus data/pydocs --out pilot.json [--size S1] [--steps 40]

The config is the paper's (or ``--config FILE``'s) with the flags' values set, then the
``--config.KEY=VALUE`` overrides (``hybrid_jax.overrides``, as ``train`` reads them).

The corpus must hold ids for its own tokenizer (``data tokenize``); a 32K BPE stands for the
paper's. The run trains in a temporary directory; only the JSON summary is kept. The first
logged interval (compilation) is left out of the figures.
"""

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

DEVICE_KINDS = {"H100": "h100", "H200": "h200", "TPU v5p": "v5p", "TPU v5 lite": "v5e",
                "TPU v4": "v4", "TPU v6 lite": "v6e"}


PROG = "python -m hybrid_jax.bench.pilot"


def _parser():
  from hybrid_jax import overrides
  from hybrid_jax.bench import add_config
  from hybrid_jax.cli_args import ArgumentParser, usage
  p = ArgumentParser(prog=PROG, description=__doc__.splitlines()[0], usage=usage(
      PROG, "--corpus DIR", "--out FILE", "[--config FILE]", overrides.USAGE,
      "[--tokenizer TOKENIZER]", "[--size SIZE]", "[--pattern PATTERN]", "[--seq-len N]",
      "[--batch-size N]", "[--microbatches N]", "[--steps N]", "[--log-every N]",
      "[--workers N]", "[--plan FILE]"))
  add_config(p, "the paper config, hybrid_jax/configs/paper.py")
  p.add_argument("--corpus", required=True, metavar="DIR",
                 help="a built corpus holding its tokenizer's ids")
  p.add_argument("--tokenizer", default=None, help="tokenizer spec (default: the corpus directory)")
  p.add_argument("--size", default="S1", help="model size (configs/sizes.py)")
  p.add_argument("--pattern", default="SF", help="layer pattern")
  p.add_argument("--seq-len", type=int, default=16384, metavar="N", help="tokens per row")
  p.add_argument("--batch-size", type=int, default=8, metavar="N", help="rows per step")
  p.add_argument("--microbatches", type=int, default=1, metavar="N",
                 help="gradient accumulation steps")
  p.add_argument("--steps", type=int, default=40, metavar="N", help="steps to train")
  p.add_argument("--log-every", type=int, default=5, metavar="N",
                 help="steps per logged interval")
  p.add_argument("--workers", type=int, default=-1, metavar="N",
                 help="data.workers (-1: the trainer's choice)")
  p.add_argument("--plan", default=None, metavar="FILE",
                 help="a plan .jsonl whose first record is this config's")
  p.add_argument("--out", required=True, metavar="FILE", help="the JSON summary to write")
  return p


def requested(args, argv):
  """The config to run, unresolved: ``--config FILE``'s, the flags, then the overrides
  ``argv``; a mistake is one line (a BenchError)."""
  from hybrid_jax.bench import run_config
  from hybrid_jax.configs import paper

  def flags(c):
    c.model.size, c.model.pattern = args.size, args.pattern
    c.model.vocab_size = None
    c.data.corpus, c.data.tokenizer = args.corpus, args.tokenizer or args.corpus
    c.data.seq_len, c.data.workers = args.seq_len, args.workers
    c.data.short_len = min(c.data.short_len, args.seq_len)
    c.data.n_pairs = min(c.data.n_pairs, args.seq_len // 28)
    c.train.batch_size, c.train.microbatches = args.batch_size, args.microbatches
    c.train.tokens_per_param, c.train.steps = None, args.steps
    c.train.warmup_steps, c.train.log_every = min(c.train.warmup_steps, args.steps), args.log_every
    c.checkpoint.every, c.checkpoint.log_per_octave = 10 ** 9, 0
    c.eval.every = None
  return run_config(args.config, argv, setup=flags, default=paper.__file__)


def config(args, argv=()):
  """The resolved config to run (a bad corpus or size: one ConfigError line)."""
  from hybrid_jax.resolve import resolve
  return resolve(requested(args, argv))


def summarize(cfg, records, device_kind: str, peak: float | None, plan: dict | None) -> dict:
  from hybrid_jax.model.flops import model_flops_per_token
  settled = records[1:] or records
  tokens_per_step = cfg.train.batch_size * cfg.data.seq_len
  step_s = tokens_per_step / statistics.median(r["tokens_per_s"] for r in settled)
  flops_step = model_flops_per_token(cfg) * tokens_per_step
  out = dict(device=device_kind, size=cfg.model.size, pattern=cfg.model.pattern,
             seq_len=cfg.data.seq_len, batch_size=cfg.train.batch_size,
             microbatches=cfg.train.microbatches, tokenizer_vocab=cfg.model.vocab_size,
             steps=records[-1]["step"] if records else 0, step_s=step_s,
             input_wait=statistics.median(r["input_wait"] for r in settled),
             tokens_per_s=tokens_per_step / step_s, model_flops_per_step=flops_step,
             mfu=flops_step / step_s / peak if peak else None,
             loss_first=records[0]["loss"] if records else None,
             loss_last=records[-1]["loss"] if records else None)
  if plan:
    out.update(plan_run=plan.get("run"), plan_topology=plan.get("topology"),
               roofline_step_s=plan.get("step_s"), plan_input_s=plan.get("input_s"),
               step_over_roofline=step_s / plan["step_s"] if plan.get("step_s") else None)
  return out


def main(argv=None) -> dict:
  args, rest = _parser().parse_known_args(sys.argv[1:] if argv is None else argv)
  cfg = config(args, rest)               # a bad corpus, size or key: one line before any compute
  import jax
  from pallas_kernels.targets import CHIPS
  from hybrid_jax.run import RunDir
  from hybrid_jax.standard_run import train
  kind = jax.devices()[0].device_kind
  chip = next((CHIPS[v] for k, v in DEVICE_KINDS.items() if k in kind), None)
  plan = json.loads(Path(args.plan).read_text().splitlines()[0]) if args.plan else None
  with tempfile.TemporaryDirectory() as tmp:
    t0 = time.perf_counter()
    train(cfg, Path(tmp) / "pilot", progress=False)
    wall = time.perf_counter() - t0
    records = RunDir(Path(tmp) / "pilot").read_metrics()
  out = summarize(cfg, records, kind, chip.peak_bf16_flops if chip else None, plan)
  out["wall_s"] = wall
  Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
  print(json.dumps(out))
  return out


if __name__ == "__main__":
  from hybrid_jax.cli_args import run_tool
  sys.exit(run_tool(main))
