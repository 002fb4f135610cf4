"""``hybrid-jax bench``: figures, not tests. Prints

1. forward+backward time of full causal attention, blockwise SWA and dense masked SWA at
   several sequence lengths with the number of tokens per batch fixed, and their ratios;
2. forward+backward time of the chunked recurrent scans against the sequential per-token
   scans, with the number of tokens per batch fixed;
3. training tokens/s and model-FLOPs utilisation (MFU) of the toy default and of a
   d_model=256 model, against this machine's fp32 matmul rate measured in the same run.
"""

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from hybrid_jax.model.flops import model_flops_per_token


def _time(fn, *args, reps=2):
  """Best wall time of ``reps`` calls after one compile-and-run call."""
  jax.block_until_ready(fn(*args))
  best = float("inf")
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    best = min(best, time.perf_counter() - t0)
  return best


def _normal_inputs(seed, *shapes):
  keys = jax.random.split(jax.random.PRNGKey(seed), len(shapes))
  return [jax.random.normal(key, shape) for key, shape in zip(keys, shapes)]


def matmul_peak_flops(n=2048, reps=10) -> float:
  """fp32 matmul rate of this machine: the denominator of MFU."""
  a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
  b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
  f = jax.jit(lambda a, b: a @ b)
  return 2 * n ** 3 / _time(f, a, b, reps=reps)


def _attention_fwd_bwd(impl, window):
  from pallas_kernels.swa import api

  def loss(q, k, v):
    if impl == "full":
      o = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="xla")
    else:
      o = api.sliding_window_attention(q, k, v, window=window, implementation=impl)
    return jnp.sum(o.astype(jnp.float32))
  return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def bench_attention(lengths, tokens, window, heads, kv_heads, head_dim, dense_at, reps):
  rows = []
  for t in lengths:
    b = max(1, tokens // t)
    q, k, v = _normal_inputs(t, (b, t, heads, head_dim), (b, t, kv_heads, head_dim),
                             (b, t, kv_heads, head_dim))
    row = dict(T=t, B=b)
    row["full_s"] = _time(_attention_fwd_bwd("full", None), q, k, v, reps=reps)
    row["swa_s"] = _time(_attention_fwd_bwd("xla", window), q, k, v, reps=reps)
    if t in dense_at:
      row["dense_masked_swa_s"] = _time(_attention_fwd_bwd("reference", window), q, k, v, reps=reps)
    rows.append(row)
    print(json.dumps(row), flush=True)
  return rows


def _recurrent_fwd_bwd(op, impl, chunk):
  from pallas_kernels.delta_rule import api as delta_api
  from pallas_kernels.linear_scan import api as scan_api

  def loss(q, k, v, g, beta):
    if op == "simple_gla":
      o, s = scan_api.simple_gla(q, k, v, g, implementation=impl, chunk_size=chunk)
    else:
      o, s = delta_api.gated_delta_rule(q, k, v, g, beta, implementation=impl, chunk_size=chunk)
    return jnp.sum(o) + jnp.sum(s)
  return jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4)))


def bench_recurrent(lengths, tokens, heads, dim, chunk, reps):
  rows = []
  for t in lengths:
    b = max(1, tokens // t)
    qkv, gates = (b, t, heads, dim), (b, t, heads)
    q, k, v, g, beta = _normal_inputs(t, qkv, qkv, qkv, gates, gates)
    k = k / jnp.linalg.norm(k, axis=-1, keepdims=True)
    g, beta = -jax.nn.softplus(g), jax.nn.sigmoid(beta)
    for op in ("simple_gla", "gated_delta_rule"):
      row = dict(op=op, T=t, B=b)
      for impl, key in (("xla", "chunked_s"), ("reference", "sequential_s")):
        row[key] = _time(_recurrent_fwd_bwd(op, impl, chunk), q, k, v, g, beta, reps=reps)
      rows.append(row)
      print(json.dumps(row), flush=True)
  return rows


def median_step_seconds(cfg, steps: int, mesh=None) -> float:
  """Median wall time of ``steps`` train steps of a resolved config after one compile step
  (the median is robust to the noise of a shared machine); sharded over ``mesh`` if given."""
  from hybrid_jax.data import make_source
  from hybrid_jax.train import sharding
  from hybrid_jax.train.loop import init_state
  from hybrid_jax.train.step import make_train_step
  graphdef, rest, state, tx, _ = init_state(cfg, mesh)
  shardings = sharding.state_shardings(mesh, state) if mesh is not None else None
  step_fn = make_train_step(graphdef, rest, tx, mesh=mesh, state_shardings=shardings)
  source = make_source(cfg)
  put = (lambda b: sharding.global_batch(mesh, b)) if mesh is not None else jax.device_put
  batches = [put(source.batch(s)) for s in range(steps + 1)]
  state, m = step_fn(state, batches[0])
  jax.block_until_ready(m)
  times = []
  for b in batches[1:]:
    t0 = time.perf_counter()
    state, m = step_fn(state, b)
    jax.block_until_ready(m)
    times.append(time.perf_counter() - t0)
  return float(np.median(times))


def bench_training(name, cfg, steps, peak):
  from hybrid_jax.configs import resolve
  cfg = resolve(cfg)
  dt = median_step_seconds(cfg, steps)
  tokens = cfg.train.batch_size * cfg.data.seq_len
  flops = model_flops_per_token(cfg) * tokens / dt
  row = dict(model=name, d_model=cfg.model.d_model, n_layers=cfg.model.n_layers,
             pattern=cfg.model.pattern, seq_len=cfg.data.seq_len, batch=cfg.train.batch_size,
             step_s=dt, tokens_per_s=tokens / dt, model_gflops_per_s=flops / 1e9, mfu=flops / peak)
  print(json.dumps(row), flush=True)
  return row


def training_configs():
  from hybrid_jax.configs.default import get_config
  toy = get_config()
  wide = get_config()
  wide.model.size = "custom"
  wide.model.d_model, wide.model.n_layers, wide.model.n_heads, wide.model.n_kv_heads = 256, 4, 4, 2
  wide.model.window = 128
  wide.data.seq_len = 512
  wide.train.batch_size = 8
  return [("toy default", toy), ("d_model=256", wide)]


def main(argv=None):
  p = argparse.ArgumentParser(prog="hybrid-jax bench", description=__doc__.splitlines()[0])
  p.add_argument("--lengths", default="1024,2048,4096,8192,16384")
  p.add_argument("--tokens", type=int, default=16384, help="B*T of every attention batch")
  p.add_argument("--window", type=int, default=128)
  p.add_argument("--heads", type=int, default=2)
  p.add_argument("--kv-heads", type=int, default=2)
  p.add_argument("--head-dim", type=int, default=64)
  p.add_argument("--reps", type=int, default=2)
  p.add_argument("--train-steps", type=int, default=10)
  p.add_argument("--recurrent-lengths", default="1024,4096,16384")
  p.add_argument("--chunk", type=int, default=64)
  p.add_argument("--skip", choices=["attention", "recurrent", "training"], action="append",
                 default=[])
  a = p.parse_args(argv)
  lengths = [int(x) for x in a.lengths.split(",")]
  print(f"# backend={jax.default_backend()} devices={jax.device_count()}", flush=True)
  summary = {}
  if "attention" not in a.skip:
    print(f"# attention fwd+bwd, B*T={a.tokens}, H={a.heads}, H_kv={a.kv_heads}, "
          f"D={a.head_dim}, w={a.window}", flush=True)
    rows = bench_attention(lengths, a.tokens, a.window, a.heads, a.kv_heads, a.head_dim,
                           dense_at={max(lengths)}, reps=a.reps)
    by_t = {r["T"]: r for r in rows}
    t_max, t_ref = max(lengths), 2048 if 2048 in by_t else min(lengths)
    summary["swa_time_per_token_T%d_over_T%d" % (t_max, t_ref)] = (
        by_t[t_max]["swa_s"] / by_t[t_ref]["swa_s"])
    summary[f"full_over_swa_at_T{t_max}"] = by_t[t_max]["full_s"] / by_t[t_max]["swa_s"]
    summary[f"dense_masked_over_swa_at_T{t_max}"] = (
        by_t[t_max]["dense_masked_swa_s"] / by_t[t_max]["swa_s"])
  if "recurrent" not in a.skip:
    rec_lengths = [int(x) for x in a.recurrent_lengths.split(",")]
    print(f"# recurrent fwd+bwd, B*T={a.tokens}, H=4, K=V={a.head_dim}, chunk={a.chunk}",
          flush=True)
    rows = bench_recurrent(rec_lengths, a.tokens, 4, a.head_dim, a.chunk, a.reps)
    t_lo, t_hi = min(rec_lengths), max(rec_lengths)
    for op in ("simple_gla", "gated_delta_rule"):
      by_t = {r["T"]: r for r in rows if r["op"] == op}
      summary[f"{op}_chunked_time_per_token_T{t_hi}_over_T{t_lo}"] = (
          by_t[t_hi]["chunked_s"] / by_t[t_lo]["chunked_s"])
      summary[f"{op}_sequential_over_chunked_at_T{t_hi}"] = (
          by_t[t_hi]["sequential_s"] / by_t[t_hi]["chunked_s"])
  if "training" not in a.skip:
    peak = matmul_peak_flops()
    print(f"# fp32 matmul peak (2048^3, best of 10, this machine): {peak / 1e9:.1f} GFLOP/s",
          flush=True)
    rows = [bench_training(name, cfg, a.train_steps, peak) for name, cfg in training_configs()]
    peak_after = matmul_peak_flops()   # the machine may have been busier before: use the best
    print(f"# fp32 matmul peak, measured again after: {peak_after / 1e9:.1f} GFLOP/s", flush=True)
    peak = max(peak, peak_after)
    summary["matmul_peak_gflops"] = peak / 1e9
    for row in rows:
      summary[f"mfu[{row['model']}]"] = row["model_gflops_per_s"] * 1e9 / peak
      summary[f"tokens_per_s[{row['model']}]"] = row["tokens_per_s"]
  print("# summary")
  print(json.dumps(summary, indent=2))
  return summary
