"""Kernel figures, not tests: ``python -m hybrid_jax.bench.kernels``.

For each op (sliding-window attention, simple GLA, gated delta rule) and each
implementation this backend can run, the forward and forward+backward time, the achieved
FLOP/s counted on the unmasked work only (the band of SWA, the causal half of a chunk), the
fraction of the device's peak, and ratios against the XLA path measured in the same run and,
for SWA, against ``jax.nn.dot_product_attention(..., local_window_size=...)`` (cuDNN on GPU).

On CPU the Pallas kernels only run interpreted, which measures Python, not the kernel:
they are left out unless ``--interpret`` asks for them, and then are labelled so.
Three reports need no accelerator, each with its baseline compiled in the same run:
``--memory TOPOLOGY`` (the delta rule's gradient temporaries against simple GLA's),
``--gpu-spills`` (registers and spill stores of every Triton kernel, from ptxas for sm_90a;
the scans also in their earlier layout) and ``--causal-xla TOPOLOGY`` (the XLA causal
attention folded against unrolled: compile time, matmul shapes, memory).
"""

import contextlib
import functools
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from hybrid_jax.cli_args import ArgumentParser, run_tool
from pallas_kernels import targets
from pallas_kernels.delta_rule import api as delta_api
from pallas_kernels.linear_scan import api as scan_api
from pallas_kernels.linear_scan import pallas_gpu
from pallas_kernels.swa import api as swa_api
from pallas_kernels.swa import xla as swa_xla

# Dense bf16 peak (FLOP/s) per device kind; --peak overrides, CPU measures its own.
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12,
             "TPU v4": 275e12, "TPU v5 lite": 197e12, "TPU v5e": 197e12, "TPU v5p": 459e12,
             "TPU v6 lite": 918e12, "TPU v6e": 918e12}


def device_peak(dtype) -> float | None:
  kind = jax.devices()[0].device_kind
  for name, peak in PEAK_BF16.items():
    if name.lower() in kind.lower():
      return peak if dtype == jnp.bfloat16 else None
  if jax.default_backend() == "cpu":
    a = jnp.ones((1024, 1024), dtype)
    f = jax.jit(lambda a: a @ a)
    return 2 * 1024 ** 3 / time_call(f, a, reps=5)
  return None


def time_call(fn, *args, reps=3) -> float:
  """Median wall time of ``reps`` calls after a compile-and-run call."""
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - t0)
  return float(np.median(times))


def fwd_and_fwd_bwd(f, args, reps):
  """(forward seconds, forward+backward seconds) of ``f(*args)`` (its first output, for
  the scans that also return a state)."""
  def first(*a):
    out = f(*a)
    return out[0] if isinstance(out, tuple) else out

  loss = lambda *a: jnp.sum(first(*a).astype(jnp.float32) ** 2)
  grad = jax.jit(jax.grad(loss, argnums=tuple(range(len(args)))))
  return time_call(jax.jit(first), *args, reps=reps), time_call(grad, *args, reps=reps)


# --- unmasked FLOPs (forward); forward+backward counts 3.5x (flash convention: the backward
# recomputes the scores and does four more matmuls) for attention, 3x for the scans.

def swa_flops(b, t, h, d, window) -> float:
  keys = float(np.sum(np.minimum(np.arange(t) + 1, window)))
  return 4.0 * b * h * d * keys


def gla_flops(b, t, h, k, v, chunk) -> float:
  intra = 2.0 * (chunk + 1) / 2 * (k + v)        # causal half of the chunk: scores and values
  return b * h * t * (intra + 2.0 * k * v + 2.0 * k * v)   # + q S, + the state update


def delta_flops(b, t, h, k, v, chunk) -> float:
  wy = 2.0 * chunk / 2 * (2 * k + v) + 2.0 * chunk * (k + v)  # A, (I+A)^-1 V and K
  return gla_flops(b, t, h, k, v, chunk) + b * h * t * (wy + 2.0 * k * v)   # + W S


def implementations(interpret: bool):
  backend = jax.default_backend()
  impls = ["xla"]
  if backend == "tpu" or (backend == "cpu" and interpret):
    impls.append("pallas_tpu")
  if backend == "gpu" or (backend == "cpu" and interpret):
    impls.append("pallas_gpu")
  return impls


def bench_swa(args, dtype, impls, peak):
  rows = []
  b, h, kv, d = args.batch, args.heads, args.kv_heads, args.head_dim
  for t in args.lengths:
    ks = jax.random.split(jax.random.PRNGKey(0), 3)
    q = jax.random.normal(ks[0], (b, t, h, d), dtype)
    k = jax.random.normal(ks[1], (b, t, kv, d), dtype)
    v = jax.random.normal(ks[2], (b, t, kv, d), dtype)
    for w in args.windows:
      flops = swa_flops(b, t, h, d, min(w, t))
      timed = {}
      for impl in impls:
        f = lambda q, k, v, impl=impl: swa_api.sliding_window_attention(
            q, k, v, window=w, implementation=impl)
        timed[impl] = fwd_and_fwd_bwd(f, (q, k, v), args.reps)
      # The library's own local-window attention (cuDNN on GPU when it supports the shape).
      lib = lambda q, k, v: jax.nn.dot_product_attention(
          q, k, v, is_causal=True, local_window_size=(w - 1, 0),
          implementation="cudnn" if jax.default_backend() == "gpu" else None)
      try:
        timed["jax.nn.dot_product_attention"] = fwd_and_fwd_bwd(lib, (q, k, v), args.reps)
      except Exception as e:  # cuDNN rejects some shapes/dtypes: say so, keep going
        print(f"# dot_product_attention T={t} w={w}: {type(e).__name__}: {str(e).splitlines()[0]}")
      rows += report("swa", f"T={t} w={w}", timed, flops, 3.5, peak)
  return rows


def bench_scan(name, op, args, dtype, impls, peak):
  rows = []
  b, h, dk = args.batch, args.heads, args.head_dim
  dv = dk
  for t in args.lengths:
    ks = jax.random.split(jax.random.PRNGKey(1), 5)
    q = jax.random.normal(ks[0], (b, t, h, dk), dtype)
    k = jax.random.normal(ks[1], (b, t, h, dk), jnp.float32)
    k = (k / jnp.linalg.norm(k, axis=-1, keepdims=True)).astype(dtype)
    v = jax.random.normal(ks[2], (b, t, h, dv), dtype)
    g = jax.nn.log_sigmoid(4.0 + jax.random.normal(ks[3], (b, t, h))).astype(jnp.float32)
    beta = jax.nn.sigmoid(jax.random.normal(ks[4], (b, t, h))).astype(jnp.float32)
    timed = {}
    for impl in impls:
      if name == "gla":
        f = lambda q, k, v, g, impl=impl: op(q, k, v, g, implementation=impl,
                                             chunk_size=args.chunk)
        inputs = (q, k, v, g)
      else:
        f = lambda q, k, v, g, beta, impl=impl: op(q, k, v, g, beta, implementation=impl,
                                                   chunk_size=args.chunk)
        inputs = (q, k, v, g, beta)
      timed[impl] = fwd_and_fwd_bwd(f, inputs, args.reps)
    flops = (gla_flops if name == "gla" else delta_flops)(b, t, h, dk, dv, args.chunk)
    rows += report(name, f"T={t}", timed, flops, 3.0, peak)
  return rows


def report(op, shape, timed, flops, bwd_factor, peak):
  rows = []
  base = timed.get("xla")
  for impl, (fwd, fwd_bwd) in timed.items():
    row = dict(op=op, shape=shape, impl=impl, fwd_ms=1e3 * fwd, fwd_bwd_ms=1e3 * fwd_bwd,
               fwd_tflops=flops / fwd / 1e12, fwd_bwd_tflops=bwd_factor * flops / fwd_bwd / 1e12)
    if base:
      row["fwd_bwd_speedup_vs_xla"] = base[1] / fwd_bwd
    lib = timed.get("jax.nn.dot_product_attention")
    if lib:
      row["fwd_bwd_speedup_vs_dot_product_attention"] = lib[1] / fwd_bwd
    if peak:
      row["fwd_bwd_fraction_of_peak"] = bwd_factor * flops / fwd_bwd / peak
    rows.append(row)
    extra = "".join(f"  {k}={v:.2f}" for k, v in row.items() if k.endswith(("_xla", "_attention", "_peak")))
    label = impl + (" (interpreted: not a speed)" if jax.default_backend() == "cpu"
                    and impl.startswith("pallas") else "")
    print(f"{op:6s} {shape:14s} {label:40s} fwd {row['fwd_ms']:9.2f} ms  fwd+bwd "
          f"{row['fwd_bwd_ms']:9.2f} ms  {row['fwd_bwd_tflops']:8.3f} TFLOP/s{extra}", flush=True)
  return rows


def recurrent_loss(op: str):
  """A scalar loss of one recurrent op's outputs, (q, k, v, g, beta) -> float32; "gla" is
  simple GLA (beta unused), "delta" the gated delta rule."""
  def loss(q, k, v, g, beta):
    if op == "gla":
      o, s = scan_api.simple_gla(q, k, v, g)
    else:
      o, s = delta_api.gated_delta_rule(q, k, v, g, beta)
    return jnp.sum(o.astype(jnp.float32)) + jnp.sum(s)
  return loss


def gradient_temp_bytes(op: str, topology: str, t: int, b=1, h=4, dk=128, dv=128,
                        dtype=jnp.bfloat16) -> int:
  """Temporary memory (bytes, per device) of the compiled forward+backward of one recurrent op
  with the kernel ``auto`` picks for ``topology``, compiled deviceless
  (``pallas_kernels.targets``) and read from ``compiled.memory_analysis()``."""
  mesh = targets.mesh(topology)
  x = lambda d: targets.abstract((b, t, h, d), dtype, mesh)
  gates = targets.abstract((b, t, h), jnp.float32, mesh)
  compiled = targets.compile_on(jax.grad(recurrent_loss(op), argnums=(0, 1, 2, 3, 4)), mesh,
                                x(dk), x(dk), x(dv), gates, gates)
  return int(compiled.memory_analysis().temp_size_in_bytes)


MEMORY_TARGET = 2.0   # the delta rule's gradient temporaries over simple GLA's, at most


def memory_report(topology: str, lengths, b=1, h=4, dk=128, dv=128) -> list[dict]:
  """The gated delta rule's gradient temporary memory against simple GLA's at the same shape
  (target: at most ``MEMORY_TARGET`` x), one row per T, printed with PASS/FAIL."""
  rows = []
  print(f"# gradient temporary memory, compiled deviceless for {topology}: B={b}, H={h}, "
        f"K={dk}, V={dv}, bf16")
  for t in lengths:
    gla = gradient_temp_bytes("gla", topology, t, b, h, dk, dv)
    delta = gradient_temp_bytes("delta", topology, t, b, h, dk, dv)
    row = dict(topology=topology, t=t, gla_temp_mb=gla / 1e6, delta_temp_mb=delta / 1e6,
               delta_over_gla=delta / max(gla, 1))
    row["passes"] = row["delta_over_gla"] <= MEMORY_TARGET
    rows.append(row)
    print(f"memory T={t:6d}  simple GLA {row['gla_temp_mb']:9.1f} MB  gated delta rule "
          f"{row['delta_temp_mb']:9.1f} MB  ratio {row['delta_over_gla']:5.2f}  "
          f"{'PASS' if row['passes'] else 'FAIL'} (target <= {MEMORY_TARGET:g})", flush=True)
  return rows


_PTXAS = re.compile(r"Function properties for (?P<name>\w+)\n\s+(?P<stack>\d+) bytes stack frame, "
                    r"(?P<spill>\d+) bytes spill stores.*?\n.*?Used (?P<regs>\d+) registers")


def ptxas_usage(ptx_text: str, ptxas: str, arch: str = "sm_90a") -> dict:
  """{entry function: (registers, spill-store bytes)} of PTX, from ``ptxas -v``."""
  with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
    f.write(ptx_text)
    f.flush()
    out = subprocess.run([ptxas, "-v", f"--gpu-name={arch}", f.name, "-o", os.devnull],
                         capture_output=True, text=True, check=True).stderr
  return {m["name"]: (int(m["regs"]), int(m["spill"])) for m in _PTXAS.finditer(out)}


def triton_kernel_usage(fn, mesh, *abstract_args) -> dict:
  """{kernel: (registers, spill-store bytes)} of the Pallas kernels (names ending ``_gpu``) in
  ``fn``'s program compiled deviceless for ``mesh``'s GPU: XLA writes each kernel's PTX
  (``xla_dump_to``) and ptxas, which XLA runs too, reports its registers."""
  with tempfile.TemporaryDirectory(prefix="ptx_") as dump:
    with jax.set_mesh(mesh):
      # "ptx": jax 0.11's XLA writes kernels' PTX only for the emitters this names (".*"
      # works too, but also writes each Triton kernel's MLIR pass log: 4x the time)
      jax.jit(fn).lower(*abstract_args).compile(
          compiler_options={"xla_dump_to": dump, "xla_dump_emitter_re": "ptx"})
    usage = {}
    for path in sorted(glob.glob(os.path.join(dump, "*.ptx"))):
      with open(path) as f:
        ptx = f.read()
      if ".entry" in ptx:                # XLA also writes empty files for kernel-less modules
        usage.update(ptxas_usage(ptx, targets.ptxas()))
  return {name: u for name, u in sorted(usage.items()) if name.endswith("_gpu")}


def gpu_spills_report(topology="h100", t=2048, b=1, h=8, d=128, window=512) -> list[dict]:
  """Registers and spill stores of each GPU kernel, forward and backward, at head dim ``d``
  (bf16): one row per kernel, printed."""
  mesh = targets.mesh(topology)
  x = lambda heads: targets.abstract((b, t, heads, d), jnp.bfloat16, mesh)
  gates = targets.abstract((b, t, h), jnp.float32, mesh)

  def program(op):
    """A new gradient function each call: jit keys its trace on the function, and a layout
    must be traced afresh to take effect."""
    if op == "swa":
      loss = lambda q, k, v: jnp.sum(swa_api.sliding_window_attention(
          q, k, v, window=window).astype(jnp.float32))
      return jax.grad(loss, argnums=(0, 1, 2)), (x(h), x(h // 2), x(h // 2))
    return jax.grad(recurrent_loss(op), argnums=(0, 1, 2, 3, 4)), (x(h), x(h), x(h), gates, gates)

  print(f"# Triton kernels compiled deviceless for {topology} (sm_90a): B={b}, T={t}, H={h}, "
        f"head dim {d}, bf16; ptxas -v; the scans also as before their state was split "
        f"(whole state per program, 4 warps)")
  rows = []
  for op in ("swa", "gla", "delta"):
    layouts = [("default", contextlib.nullcontext)]
    if op != "swa":
      layouts.append(("whole state", lambda: pallas_gpu.layout(None, 4)))
    for name, context in layouts:
      with context():
        fn, args = program(op)
        usage = triton_kernel_usage(fn, mesh, *args)
      for kernel, (regs, spill) in usage.items():
        rows.append(dict(op=op, kernel=kernel, layout=name, registers=regs,
                         spill_store_bytes=spill))
        print(f"spills {op:5s} {kernel:14s} {name:11s} {regs:4d} registers  {spill:6d} bytes "
              f"spill stores", flush=True)
  return rows


def matmul_shapes(hlo_text: str) -> set:
  """(result type, dimension numbers) of every dot in compiled HLO text: the distinct matmuls
  a GPU autotunes (XLA keeps them as dots inside its GEMM fusions)."""
  dims = r"(?:lhs|rhs)_[a-z]+_dims=\{[0-9,]*\}"
  return set(re.findall(rf"= ((?:bf16|f32)\[[0-9,]*\])\S* dot\([^)]*\), ({dims}(?:, {dims})*)",
                        hlo_text))


def causal_xla_report(topology, lengths, b=1, h=8, kv=4, d=128, block=None) -> list[dict]:
  """The XLA path of full causal attention, forward+backward, compiled deviceless for
  ``topology``, folded (GPU/TPU default) against unrolled blocks (CPU's), one row each per T:
  compile seconds, distinct matmul shapes (GPU only), temporary MB per device."""
  mesh = targets.mesh(topology)
  print(f"# XLA full causal attention, forward+backward, compiled deviceless for {topology}: "
        f"B={b}, H={h}, H_kv={kv}, D={d}, bf16")
  rows = []
  for t in lengths:
    q = targets.abstract((b, t, h, d), jnp.bfloat16, mesh)
    k = targets.abstract((b, t, kv, d), jnp.bfloat16, mesh)
    for folded in (True, False):
      f = functools.partial(swa_xla.full_causal_attention, block_size=block, folded=folded)
      fb = lambda q, k, v, f=f: jax.vjp(f, q, k, v)[1](q)
      start = time.perf_counter()
      compiled = targets.compile_on(fb, mesh, q, k, k)
      shapes = (len(matmul_shapes(compiled.as_text())) if targets.platform(topology) == "gpu"
                else None)        # TPU HLO writes its matmuls otherwise: not counted
      row = dict(topology=topology, t=t, form="folded" if folded else "unrolled",
                 compile_s=time.perf_counter() - start, matmul_shapes=shapes,
                 temp_mb=compiled.memory_analysis().temp_size_in_bytes / 1e6)
      rows.append(row)
      print(f"causal T={t:6d} {row['form']:8s} compile {row['compile_s']:6.1f} s  "
            f"{'-' if shapes is None else shapes:>3} distinct matmul shapes  temporaries "
            f"{row['temp_mb']:9.1f} MB", flush=True)
  return rows


# The attention shapes of hybrid_jax's CPU benchmark family (hybrid_jax.bench.train.SHAPES):
# name -> (B, T, H, H_kv, D, window); window >= T is full causal attention.
CPU_ROW_SHAPES = {"toy S": (8, 256, 4, 2, 16, 32), "toy F": (8, 256, 4, 2, 16, 256),
                  "toy-B4 S": (4, 256, 4, 2, 16, 32), "toy-B4 F": (4, 256, 4, 2, 16, 256),
                  "d256 S": (8, 512, 4, 2, 64, 128), "d256 F": (8, 512, 4, 2, 64, 512),
                  "d256-B4 S": (4, 512, 4, 2, 64, 128), "d256-B4 F": (4, 512, 4, 2, 64, 512)}


def _cpu_attention_ab(variants, rounds, reps) -> list[dict]:
  """Forward+backward of the XLA attention path under each of ``variants(shape)`` (name ->
  keyword arguments of ``swa.xla.sliding_window_attention``), interleaved round by round in
  one process, at every shape of CPU_ROW_SHAPES: each variant's median ms, and the median
  [min, max] over rounds of the first variant's speedup over each other one."""
  from pallas_kernels.swa import xla as swa_xla
  rows = []
  for name, (b, t, h, kv, d, window) in CPU_ROW_SHAPES.items():
    ks = jax.random.split(jax.random.PRNGKey(0), 3)
    args = (jax.random.normal(ks[0], (b, t, h, d)),
            jax.random.normal(ks[1], (b, t, kv, d)), jax.random.normal(ks[2], (b, t, kv, d)))
    grads = {}
    for label, kwargs in variants(t, window, d).items():
      f = functools.partial(swa_xla.sliding_window_attention, window=window, **kwargs)
      grads[label] = jax.jit(jax.grad(lambda *a, f=f: jnp.sum(f(*a) ** 2), argnums=(0, 1, 2)))
    times = {label: [] for label in grads}
    for _ in range(rounds):
      for label, g in grads.items():
        times[label].append(time_call(g, *args, reps=reps))
    first, *others = grads
    row = dict(shape=name, b=b, t=t, h=h, kv=kv, d=d, window=window,
               ms={label: float(np.median(ts)) * 1e3 for label, ts in times.items()})
    for other in others:
      ratios = np.array(times[other]) / np.array(times[first])
      row[f"speedup_over_{other}"] = [float(np.median(ratios)), float(ratios.min()),
                                      float(ratios.max())]
    print(f"{name:9s} B{b} T{t} H{h}/{kv} D{d} w{window}: "
          + ", ".join(f"{label} {ms:7.2f} ms" for label, ms in row["ms"].items()) + "; "
          + ", ".join(f"{first} over {other} {r[0]:.2f} [{r[1]:.2f}, {r[2]:.2f}]"
                      for other in others for r in [row[f"speedup_over_{other}"]]), flush=True)
    rows.append(row)
  return rows


def cpu_rows_report(rounds: int = 7, reps: int = 3) -> list[dict]:
  """(Example, kv head) rows a loop step (``swa.xla.rows.by_rows``, as many as the rule takes)
  against the whole batch at once."""
  return _cpu_attention_ab(lambda t, window, d: {"row by row": dict(per_row=True),
                                                 "whole batch": dict(per_row=False)},
                           rounds, reps)


def cpu_keep_report(rounds: int = 7, reps: int = 3) -> list[dict]:
  """The backward reading the forward's kept probabilities (``swa.xla`` ``keep``) against
  recomputing them (flash-style), row-by-row policy as by default."""
  return _cpu_attention_ab(lambda t, window, d: {"kept": dict(keep=True),
                                                 "recomputed": dict(keep=False)},
                           rounds, reps)


def cpu_blocks_report(rounds: int = 7, reps: int = 3) -> list[dict]:
  """The default query block (``swa.xla.default_block_size`` / ``causal_block_size``)
  against half and twice it, row-by-row policy as by default."""
  from pallas_kernels.swa import xla as swa_xla

  def variants(t, window, d):
    c = (swa_xla.causal_block_size(t, d) if window >= t
         else swa_xla.default_block_size(t, window))
    blocks = [c] + [x for x in (c // 2, 2 * c) if 1 <= x <= t]
    return {f"block {x}": dict(block_size=x) for x in blocks}
  return _cpu_attention_ab(variants, rounds, reps)


def main(argv=None):
  p = ArgumentParser(prog="python -m hybrid_jax.bench.kernels", description=__doc__.strip())
  argv = sys.argv[1:] if argv is None else list(argv)
  deviceless = ArgumentParser(prog=p.prog, add_help=False)   # known before JAX picks a backend
  deviceless.add_argument("--memory")
  deviceless.add_argument("--gpu-spills", action="store_true")
  deviceless.add_argument("--causal-xla")
  modes = deviceless.parse_known_args(argv)[0]
  if modes.memory or modes.gpu_spills or modes.causal_xla:
    # Compiled for a target, never run here: JAX stays on the CPU, so that a GPU plugin
    # installed on a host without a GPU does not fail at start and take the target with it.
    jax.config.update("jax_platforms", "cpu")
  on_cpu = jax.default_backend() == "cpu"
  on_this = "on CPU" if on_cpu else "on an accelerator"   # the defaults differ: say which
  p.add_argument("--ops", default="swa,gla,delta", help="comma-separated ops to time")
  p.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")], default=None,
                 help=f"comma-separated sequence lengths (default: "
                      f"{'1024' if on_cpu else '4096,16384'} {on_this})")
  p.add_argument("--windows", type=lambda s: [int(x) for x in s.split(",")],
                 default=[128] if on_cpu else [128, 512, 2048],
                 help=f"comma-separated SWA windows (default: "
                      f"{'128' if on_cpu else '128,512,2048'} {on_this})")
  p.add_argument("--batch", type=int, default=1, help="batch size")
  p.add_argument("--heads", type=int, default=2 if on_cpu else 16,
                 help=f"query heads (default: %(default)s {on_this})")
  p.add_argument("--kv-heads", type=int, default=1 if on_cpu else 4,
                 help=f"SWA key/value heads (default: %(default)s {on_this})")
  p.add_argument("--head-dim", type=int, default=64 if on_cpu else 128,
                 help=f"head dim; the scans' key and value dims (default: %(default)s {on_this})")
  p.add_argument("--chunk", type=int, default=64, help="the scans' chunk length")
  p.add_argument("--dtype", default="float32" if on_cpu else "bfloat16",
                 help=f"input dtype (default: %(default)s {on_this})")
  p.add_argument("--reps", type=int, default=3, help="timed repetitions")
  p.add_argument("--interpret", action="store_true",
                 help="on CPU, also run the Pallas kernels interpreted (correctness, not speed)")
  p.add_argument("--peak", type=float, default=None,
                 help="device peak FLOP/s (default: looked up for the device)")
  p.add_argument("--json", default=None, help="also write the rows to this file (default: none)")
  p.add_argument("--memory", metavar="TOPOLOGY", default=None,
                 help="instead of timing: compile deviceless for TOPOLOGY (e.g. v5e:2x2, "
                      "h100:1) and print the delta rule's vs simple GLA's gradient memory at "
                      "--lengths (4096,16384 unless given), B=1, H=4, K=V=128, bf16 "
                      "(default: time the kernels)")
  p.add_argument("--gpu-spills", action="store_true",
                 help="instead: registers and spill stores of every Triton kernel, compiled "
                      "deviceless for an H100 (sm_90a); the scans also in their earlier "
                      "layout (whole state per program, 4 warps)")
  p.add_argument("--causal-xla", metavar="TOPOLOGY", default=None,
                 help="instead: compile the XLA path of full causal attention deviceless for "
                      "TOPOLOGY (e.g. h100, v5e:1x1), folded against unrolled blocks, at "
                      "--lengths (2048,16384 unless given): compile time, distinct matmul "
                      "shapes, temporary memory (default: time the kernels)")
  p.add_argument("--cpu-rows", action="store_true",
                 help="instead: the CPU attention path row by row against the whole batch, "
                      "fwd+bwd at the toy family's shapes (pin to one core: taskset -c 0)")
  p.add_argument("--cpu-blocks", action="store_true",
                 help="instead: the CPU attention path's default query block against half and "
                      "twice it, fwd+bwd at the toy family's shapes (pin to one core)")
  p.add_argument("--cpu-keep", action="store_true",
                 help="instead: the CPU attention path's backward from kept probabilities "
                      "against recomputed ones, fwd+bwd at the toy family's shapes")
  args = p.parse_args(argv)
  given_lengths = args.lengths                  # the compile-only modes have defaults of their own
  args.lengths = args.lengths or ([1024] if on_cpu else [4096, 16384])
  if args.cpu_rows or args.cpu_blocks or args.cpu_keep:
    report = (cpu_rows_report if args.cpu_rows else cpu_blocks_report if args.cpu_blocks
              else cpu_keep_report)
    return _write_rows(args.json, report(reps=args.reps))
  if args.gpu_spills:
    _check_target(p, "--gpu-spills", "h100")
    return _write_rows(args.json, gpu_spills_report())
  if args.causal_xla:
    _check_target(p, "--causal-xla", args.causal_xla)
    lengths = given_lengths or [2048, 16384]
    return _write_rows(args.json, causal_xla_report(args.causal_xla, lengths))
  if args.memory:
    _check_target(p, "--memory", args.memory)
    lengths = given_lengths or [4096, 16384]
    return _write_rows(args.json, memory_report(args.memory, lengths))
  ops = args.ops.split(",")
  unknown = sorted(set(ops) - {"swa", "gla", "delta"})
  if unknown:
    p.error(f"--ops: unknown {', '.join(unknown)} (known: swa, gla, delta)")
  if any(x < 1 for x in args.lengths + args.windows) or args.reps < 1:
    p.error("--lengths, --windows and --reps must be >= 1")
  dtype = jnp.dtype(args.dtype)
  peak = args.peak or device_peak(dtype)
  impls = implementations(args.interpret)
  print(f"# {jax.devices()[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}, "
        f"{args.dtype}, peak {peak / 1e9 if peak else float('nan'):.0f} GFLOP/s; "
        f"implementations: {', '.join(impls)}")
  if on_cpu:
    print("# CPU: the XLA path is the one that runs here; interpret-mode times are not speed.")
  rows = []
  if "swa" in ops:
    rows += bench_swa(args, dtype, impls, peak)
  if "gla" in ops:
    rows += bench_scan("gla", scan_api.simple_gla, args, dtype, impls, peak)
  if "delta" in ops:
    rows += bench_scan("delta", delta_api.gated_delta_rule, args, dtype, impls, peak)
  return _write_rows(args.json, rows)


def _check_target(p, flag, topology):
  """One parser error line for a topology this host cannot compile for (unknown, or its
  compiler missing: the line says how to install it)."""
  try:
    targets.parse(topology)
    reason = targets.missing(targets.platform(topology))
  except targets.TargetError as e:
    reason = str(e)
  if reason:
    p.error(f"{flag}: {reason}")


def _write_rows(path, rows):
  """``rows`` to ``--json``'s file (when given); returns them."""
  if path:
    with open(path, "w") as f:
      json.dump(rows, f, indent=1)
  return rows


if __name__ == "__main__":
  sys.exit(run_tool(main))
