"""The first thing to run on a GPU or TPU: ``python -m hybrid_jax.bench.device_check``.

One command, one JSON file (``--out``, default ``device_check_<platform>.json``):

1. ``correctness``: every op with ``implementation="auto"`` (the compiled kernel of this
   accelerator) against its XLA path, forward and every gradient, fp32 and bf16;
2. ``timing``: forward+backward of every op at T = 2K..32K, the kernel against the XLA
   path and, for sliding-window attention, ``jax.nn.dot_product_attention`` (cuDNN on GPU);
   on a GPU also the scan kernels' layout before their state was split over programs
   (``WHOLE_STATE``), which settles that split;
3. ``training``: 20 steps of S1 SF, GF and MF with ``auto`` kernels (losses finite and
   falling).

Each row is saved as it comes, and a row that fails records its error in one line (``ok``
false) and the check goes on; timing runs last since it is the longest part, its kernels at
every length before the XLA baselines they are compared with (``add_speedups`` pairs them).
On a machine lent for a fixed time, ``--budget-s`` stops starting rows in time for the file
to say which were skipped, and ``--sections`` picks the order
(``training,timing,correctness`` puts first what has not yet run on a device).

On a CPU host it refuses with one line (the kernels only compile there: see
``python -m hybrid_jax.bench.kernels --memory TOPOLOGY`` and tests/test_pallas_compile.py).
"""

import contextlib
import json
import os
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from hybrid_jax.cli_args import ArgumentParser, run_tool
from hybrid_jax.configs.base import base_config
from hybrid_jax.run import RunDir
from hybrid_jax.train import loop
from hybrid_jax.bench import kernels as bench
from pallas_kernels import dispatch
from pallas_kernels.delta_rule import api as delta_api
from pallas_kernels.linear_scan import api as scan_api
from pallas_kernels.linear_scan import pallas_gpu
from pallas_kernels.swa import api as swa_api

OPS = ("swa", "gla", "delta")
# The GPU scan kernels as they were before their state's value columns were split over
# programs (one program per head, 4 warps): timed beside "auto" to settle the split on a GPU.
WHOLE_STATE = "auto, whole state per program"
SECTIONS = ("correctness", "training", "timing")
TOLERANCE = {"float32": 2e-3, "bfloat16": 5e-2}   # relative to the XLA path's largest value


def inputs(op, b, t, h, d, dtype, seed=0):
  """Arguments of ``op`` ([B, T, H, D]; SWA with H / 2 kv heads), unit keys for the delta rule."""
  ks = jax.random.split(jax.random.PRNGKey(seed), 5)
  if op == "swa":
    q = jax.random.normal(ks[0], (b, t, h, d), dtype)
    k, v = (jax.random.normal(kk, (b, t, max(1, h // 2), d), dtype) for kk in ks[1:3])
    return (q, k, v)
  q, k, v = (jax.random.normal(kk, (b, t, h, d), jnp.float32) for kk in ks[:3])
  k = k / jnp.linalg.norm(k, axis=-1, keepdims=True)
  g = -jax.nn.softplus(jax.random.normal(ks[3], (b, t, h)))
  beta = jax.nn.sigmoid(jax.random.normal(ks[4], (b, t, h)))
  return (q.astype(dtype), k.astype(dtype), v.astype(dtype), g, beta)


def op_fn(op, implementation, window=None, interpret=None):
  """(*arrays) -> first output (o) of ``op`` with ``implementation``."""
  if op == "swa":
    return lambda q, k, v: swa_api.sliding_window_attention(
        q, k, v, window=window, implementation=implementation, interpret=interpret)
  if op == "gla":
    return lambda q, k, v, g, beta: scan_api.simple_gla(
        q, k, v, g, implementation=implementation, interpret=interpret)[0]
  return lambda q, k, v, g, beta: delta_api.gated_delta_rule(
      q, k, v, g, beta, implementation=implementation, interpret=interpret)[0]


def max_relative_error(got, want) -> float:
  got, want = (np.asarray(x, np.float32) for x in (got, want))
  return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-6))


def compare(op, implementation, args, window=None, interpret=None, baseline="xla") -> dict:
  """Forward and every gradient (vjp of a fixed random cotangent) of ``implementation``
  against ``baseline``: the worst relative error of each."""
  ct = jax.random.normal(jax.random.PRNGKey(9), args[0].shape[:3] + (
      args[2].shape[-1],), jnp.float32).astype(args[0].dtype)
  results = {}
  for impl in (implementation, baseline):
    out, vjp = jax.vjp(op_fn(op, impl, window, interpret if impl == implementation else None),
                       *args)
    results[impl] = (out, vjp(ct))
  out, grads = results[implementation]
  want_out, want_grads = results[baseline]
  row = dict(op=op, implementation=implementation, baseline=baseline,
             dtype=str(args[0].dtype), shape=list(args[0].shape),
             forward=max_relative_error(out, want_out),
             gradients=[max_relative_error(g, w) for g, w in zip(grads, want_grads)])
  row["ok"] = bool(max([row["forward"]] + row["gradients"]) <= TOLERANCE[row["dtype"]])
  return row


def time_op(op, args, window, implementations, reps, dot_product_attention=True) -> list[dict]:
  """Forward and forward+backward milliseconds of each implementation (and, for SWA unless
  ``dot_product_attention`` is off, of ``jax.nn.dot_product_attention`` with the same
  window), with speedups against XLA when it is among them (``add_speedups``, which also
  pairs rows timed apart)."""
  fns = {impl: op_fn(op, "auto" if impl == WHOLE_STATE else impl, window)
         for impl in implementations}
  if op == "swa" and dot_product_attention:
    fns["jax.nn.dot_product_attention"] = lambda q, k, v: jax.nn.dot_product_attention(
        q, k, v, is_causal=True, local_window_size=(window - 1, 0))
  rows = []
  for name, fn in fns.items():
    try:
      with (pallas_gpu.layout(None, 4) if name == WHOLE_STATE else contextlib.nullcontext()):
        fwd, fwd_bwd = bench.fwd_and_fwd_bwd(fn, args, reps)
      rows.append(dict(op=op, implementation=name, t=args[0].shape[1], window=window,
                       fwd_ms=fwd * 1e3, fwd_bwd_ms=fwd_bwd * 1e3))
    except Exception as e:          # a baseline this device lacks (e.g. cuDNN's window)
      rows.append(dict(op=op, implementation=name, t=args[0].shape[1], window=window,
                       error=error_line(e)))
  add_speedups(rows)
  return rows


def add_speedups(rows) -> None:
  """``fwd_bwd_speedup_vs_xla`` on every timed row whose (op, t, window) has an XLA row."""
  xla = {(r["op"], r["t"], r["window"]): r["fwd_bwd_ms"] for r in rows
         if r.get("implementation") == "xla" and "fwd_bwd_ms" in r}
  for r in rows:
    key = (r.get("op"), r.get("t"), r.get("window"))
    if key in xla and "fwd_bwd_ms" in r:
      r["fwd_bwd_speedup_vs_xla"] = xla[key] / r["fwd_bwd_ms"]


def train_steps(pattern, steps, seq_len, batch, size="S1") -> dict:
  """``steps`` training steps of ``pattern`` at ``size`` with the default (auto) kernels in a
  temporary run directory: the losses, the run's status and its wall time."""
  cfg = base_config()
  cfg.model.size, cfg.model.pattern = size, pattern
  cfg.data.seq_len, cfg.train.batch_size, cfg.train.steps = seq_len, batch, steps
  cfg.train.warmup_steps = max(1, steps // 4)
  cfg.train.log_every = 1
  cfg.checkpoint.every = 10 * steps
  cfg.eval.every = None
  with tempfile.TemporaryDirectory(prefix="device_check_") as workdir:
    t0 = time.perf_counter()
    status = loop.train(cfg, workdir, progress=False) or {}
    seconds = time.perf_counter() - t0
    metrics = RunDir(workdir, writer=False).read_metrics()
  losses = [r["loss"] for r in metrics]
  ok = (status.get("state") == "done" and len(losses) == steps
        and all(np.isfinite(losses)) and losses[-1] < losses[0])
  return dict(pattern=pattern, size=size, steps=steps, seq_len=seq_len, batch=batch,
              seconds=seconds, state=status.get("state"), losses=losses,
              # the first step holds the compile (and GPU autotuning): its rate apart
              first_step_tokens_per_s=metrics[0]["tokens_per_s"] if metrics else None,
              last_step_tokens_per_s=metrics[-1]["tokens_per_s"] if metrics else None,
              ok=bool(ok))


def error_line(e: Exception) -> str:
  """An exception as one bounded line, for a row that failed."""
  return f"{type(e).__name__}: {e}".splitlines()[0][:500]


def write_json_atomically(path, payload):
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".device_check_", suffix=".json")
  with os.fdopen(fd, "w") as f:
    json.dump(payload, f, indent=1)
  os.replace(tmp, path)


def main(argv=None) -> int:
  p = ArgumentParser(prog="python -m hybrid_jax.bench.device_check",
                     description=__doc__.splitlines()[0])
  p.add_argument("--out", default=None, help="JSON file (default: device_check_<platform>.json)")
  p.add_argument("--lengths", default="2048,4096,8192,16384,32768",
                 help="comma-separated sequence lengths of the kernel rows")
  p.add_argument("--window", type=int, default=2048, help="SWA window of the kernel rows")
  p.add_argument("--heads", type=int, default=8, help="heads of the kernel rows")
  p.add_argument("--head-dim", type=int, default=128, help="head dim of the kernel rows")
  p.add_argument("--reps", type=int, default=5, help="timed repetitions per kernel row")
  p.add_argument("--steps", type=int, default=20, help="training steps per pattern")
  p.add_argument("--train-seq-len", type=int, default=4096, help="training rows' length")
  p.add_argument("--train-batch", type=int, default=8, help="training rows per step")
  p.add_argument("--patterns", default="SF,GF,MF", help="comma-separated layer patterns trained")
  p.add_argument("--sections", default=",".join(SECTIONS),
                 help="which sections to run, in this order")
  p.add_argument("--budget-s", type=float, default=None,
                 help="start no row after this many seconds: the rest is listed as skipped "
                      "and the file is complete, rather than cut by a machine's time limit")
  args = p.parse_args(argv)
  sections = args.sections.split(",")
  if not sections or any(s not in SECTIONS for s in sections) or len(set(sections)) < len(sections):
    p.error(f"--sections: distinct names from {','.join(SECTIONS)}; got {args.sections!r}")
  try:
    lengths = [int(x) for x in args.lengths.split(",")]
  except ValueError:
    p.error(f"--lengths: comma-separated integers; got {args.lengths!r}")
  if min(lengths + [args.window, args.steps, args.reps]) < 1:
    p.error("--lengths, --window, --steps and --reps must be >= 1")
  platform = dispatch.target_platform()
  if platform == "cpu":
    print("device_check needs a GPU or TPU (this host's JAX backend is cpu); to compile for "
          "one from here: python -m hybrid_jax.bench.kernels --memory v5e:1x1", file=sys.stderr)
    return 2
  out = args.out or f"device_check_{platform}.json"
  kernel = dispatch.resolve("auto")[0]
  report = dict(device=jax.devices()[0].device_kind, platform=platform, kernel=kernel,
                jax=jax.__version__, jaxlib=getattr(jax.lib, "__version__", None),
                python=sys.version.split()[0], args=vars(args), correctness=[], timing=[],
                training=[], skipped=[])
  started = time.perf_counter()

  def save():
    add_speedups(report["timing"])
    write_json_atomically(out, report)

  def run_row(section, fn, what):
    """``fn()``'s rows (a list) into ``section``, or its error in one line (ok False), so that one
    failure (a kernel this jax cannot build, say) does not cost the rest of the check; past
    the budget, the row is listed as skipped instead."""
    elapsed = time.perf_counter() - started
    if args.budget_s is not None and elapsed > args.budget_s:
      report["skipped"].append(dict(what, section=section))
      save()
      return
    t0 = time.perf_counter()
    try:
      rows = fn()
    except Exception as e:                         # noqa: BLE001 -- recorded, not hidden
      rows = [dict(what, ok=False, error=error_line(e))]
    for row in rows:
      row.update(row_s=time.perf_counter() - t0, elapsed_s=time.perf_counter() - started)
      report[section].append(row)
      print(json.dumps({k: v for k, v in row.items() if k != "losses"}), flush=True)
    save()

  for section in sections:
    for fn, what in section_rows(section, args, lengths):
      run_row(section, fn, what)
  report["ok"] = all(r["ok"] for r in report["correctness"] + report["training"])
  if report["skipped"] or set(sections) != set(SECTIONS):
    report["ok"] = False
    report["incomplete"] = (f"{len(report['skipped'])} rows skipped past the "
                            f"{args.budget_s:g} s budget" if report["skipped"] else
                            f"ran only {','.join(sections)}")
  save()
  print(f"wrote {out}: {'all checks passed' if report['ok'] else 'SOME CHECKS FAILED'}"
        + (f" ({report['incomplete']})" if "incomplete" in report else ""))
  return 0 if report["ok"] else 1


def section_rows(section, args, lengths, platform=None):
  """(fn, what) of each row of ``section``: ``fn()`` returns its rows (a list: timing gives
  one per implementation); ``what`` names the row if it fails or is skipped. ``platform``
  (None: this host's target) adds the GPU scans' earlier layout (``WHOLE_STATE``) on "gpu"."""
  if section == "correctness":                     # kernel against XLA, fwd + grads
    for op in OPS:
      for dtype in (jnp.float32, jnp.bfloat16):
        for t in (1000, 4096):                     # ragged and aligned
          yield (lambda op=op, dtype=dtype, t=t: [compare(
              op, "auto", inputs(op, 2, t, 4, 128, dtype), window=min(512, t))],
                 dict(op=op, dtype=jnp.dtype(dtype).name, t=t))
  elif section == "training":                      # training with auto kernels
    for pattern in args.patterns.split(","):
      yield (lambda pattern=pattern: [train_steps(pattern, args.steps, args.train_seq_len,
                                                   args.train_batch)], dict(pattern=pattern))
  else:                                            # timing: the longest part
    # The kernels (and cuDNN's attention) at every length first, then the XLA baselines,
    # the attention one at w >= T last of all: on an H200 its unrolled form (a matmul shape
    # per query block) took 81 s to compile its forward at T=2048 and the machine's limit
    # came during its gradient's, which lost the row's kernel timings with it. It is folded
    # into one shape since (swa/xla/folded.py), not yet compiled on a device.
    def row(op, t, implementation):
      return (lambda: time_op(op, inputs(op, 1, t, args.heads, args.head_dim, jnp.bfloat16),
                              min(args.window, t), (implementation,), args.reps,
                              dot_product_attention=implementation == "auto"),
              dict(op=op, t=t, implementation=implementation))
    causal_xla = lambda op, t: op == "swa" and args.window >= t
    yield from (row(op, t, "auto") for t in lengths for op in OPS)
    if (platform or dispatch.target_platform()) == "gpu":
      yield from (row(op, t, WHOLE_STATE) for t in lengths for op in ("gla", "delta"))
    yield from (row(op, t, "xla") for t in lengths for op in OPS if not causal_xla(op, t))
    yield from (row(op, t, "xla") for t in lengths for op in OPS if causal_xla(op, t))


if __name__ == "__main__":
  sys.exit(run_tool(main))
