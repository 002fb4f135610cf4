"""``hybrid-jax sweep submit|status|collect``: submit a grid of runs, show its status, or
collect its metrics into one table."""

import sys
from pathlib import Path

from hybrid_jax import overrides
from hybrid_jax.cli_args import ArgumentParser, key_values, usage
from hybrid_jax.errors import UserError
from hybrid_jax.launch import report
from hybrid_jax.run import collect_rows
from hybrid_jax.run.collect import write_rows


def main(argv):
  p = ArgumentParser(prog="hybrid-jax sweep", description="Submit a grid of runs, plan its cost, "
                     "show its status, or collect its metrics into one table.")
  sub = p.add_subparsers(dest="cmd", required=True)
  s = sub.add_parser("submit", help="train every run of a sweep file not yet done",
                     usage=usage("hybrid-jax sweep submit", "SWEEP_FILE", "--root ROOT",
                                 "[--backend {local,slurm,ray}]", "[--parallel N]", "[--dry-run]",
                                 "[--retry-failed]", "[--slurm KEY=VALUE ...]", "[--ray KEY=VALUE ...]",
                                 "[--plan PLAN.jsonl]", "[--ray-address ADDR]", "[--max-attempts N]",
                                 "[--wait]", overrides.USAGE),
                     epilog="--config.KEY=VALUE overrides every run's config (keys: "
                     "hybrid_jax/configs/base.py; e.g. --config.train.steps=20).")
  s.add_argument("sweep_file", help="A Python file defining get_sweep() (see hybrid_jax.launch.grid).")
  s.add_argument("--root", required=True, help="directory holding one run directory per grid point")
  s.add_argument("--backend", choices=["local", "slurm", "ray"], default="local",
                 help="where the runs train: processes on this machine, Slurm jobs (submitit), "
                      "or tasks on a Ray cluster (TPU slices, GPU nodes)")
  s.add_argument("--parallel", type=int, default=None, metavar="N",
                 help="local workers (default: one per core)")
  s.add_argument("--dry-run", action="store_true", help="print the grid, N, tokens and FLOPs; run nothing")
  s.add_argument("--retry-failed", action="store_true", help="also rerun runs that failed")
  s.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE",
                 help="submitit parameter for --backend slurm (timeout_min=60, gpus_per_node=8, "
                      "slurm_partition=gpu, ...); repeatable; wins over the sweep file's "
                      "(default: the sweep file's alone)")
  s.add_argument("--ray", action="append", default=[], metavar="KEY=VALUE",
                 help="--backend ray: what each run asks for, per process: cpus=1, gpus=8, "
                      "tpu=v5p:2x2x1 (a slice; one process per host), slices=2, processes=2 "
                      "(hosts of a CPU/GPU run), memory=BYTES, resources={'host_a': 1}; "
                      "repeatable; wins over the sweep file's ray= dict and --plan (default: "
                      "those alone)")
  s.add_argument("--plan", action="append", default=[], metavar="PLAN.jsonl",
                 help="--backend ray: a `sweep plan` output; each run asks for its planned "
                      "topology and the host memory of its state; repeatable (one per "
                      "topology): a run takes the first plan that fits it (default: none)")
  s.add_argument("--ray-address", default="auto", metavar="ADDR",
                 help="--backend ray: the cluster (HOST:PORT of its head, ray://HOST:PORT, or "
                      "auto: the one this machine belongs to)")
  s.add_argument("--max-attempts", type=int, default=3, metavar="N",
                 help="--backend ray: attempts per run (a lost node or a preemption costs one; "
                      "each resumes from the last checkpoint)")
  s.add_argument("--wait", action="store_true",
                 help="--backend slurm or ray: wait until every run ended")
  st = sub.add_parser("status", help="a table of the runs under a directory")
  st.add_argument("root", help="A sweep directory (or one run directory).")
  st.add_argument("--ray-address", default=None, metavar="ADDR",
                  help="read Ray's view from this cluster (default: the one the last "
                       "--backend ray submission used)")
  c = sub.add_parser("collect", help="one CSV/TSV of runs x checkpoints x metrics")
  c.add_argument("root", help="A sweep directory (or one run directory).")
  c.add_argument("--out", default=None,
                 help="output file, .csv or .tsv (default: ROOT/collected.csv)")
  # `sweep plan` compiles runs, as `plan` does: hybrid_jax.cli dispatches it to
  # hybrid_jax.commands.plan; it is listed here so that `sweep --help` shows it.
  sub.add_parser("plan", add_help=False, help="compile every run of a sweep file for a TPU or "
                 "GPU topology: memory, FLOPs, step time and the grid's cost")
  args, rest = p.parse_known_args(argv)
  if args.cmd == "submit":
    config_overrides = overrides.parse(rest, command="sweep submit")
    slurm = key_values(args.slurm, "--slurm")
    if args.parallel is not None and args.parallel < 1:
      raise UserError(f"--parallel must be >= 1, got {args.parallel}")
    if args.max_attempts < 1:
      raise UserError(f"--max-attempts must be >= 1, got {args.max_attempts}")
    from hybrid_jax.launch.submit import submit   # lazy: JAX, seconds; --help stays instant
    try:
      results = submit(args.sweep_file, args.root, backend=args.backend, parallel=args.parallel,
                       dry_run=args.dry_run, overrides=config_overrides, retry_failed=args.retry_failed,
                       slurm=slurm, wait=args.wait, ray=args.ray, plan=args.plan,
                       ray_address=args.ray_address, max_attempts=args.max_attempts,
                       log=lambda m: print(f"hybrid-jax sweep: {m}", flush=True))
    except RuntimeError as e:      # e.g. submitit missing or failing; SweepError is a UserError
      if isinstance(e, UserError):
        raise
      raise UserError(str(e)) from None
    except KeyboardInterrupt as e:
      print(f"hybrid-jax sweep: {e}", file=sys.stderr)
      raise SystemExit(143)
    return 1 if any(code not in (0, -1) for code in results.values()) else 0   # -1: still queued
  if args.cmd == "plan":
    raise UserError("sweep plan: run it as hybrid-jax sweep plan SWEEP_FILE --topology T")
  if rest:
    raise UserError(f"unrecognised arguments: {' '.join(rest)}")
  root = Path(args.root)
  if not root.is_dir():
    raise UserError(f"{root} is not a directory")
  if args.cmd == "status":
    print(report.status_table(root, ray_address=args.ray_address))
    return 0
  out = Path(args.out) if args.out else root / "collected.csv"
  rows, skipped = collect_rows(root, with_skipped=True)
  if not rows:
    raise UserError(f"no run under {root} has a config.json and records yet; nothing to collect")
  write_rows(rows, out, default_out=not args.out)   # a read-only root: one line naming --out
  print(f"hybrid-jax sweep: wrote {out} ({len(rows)} rows; {skipped} unreadable records skipped)")
  return 0
