"""``hybrid-jax bench mixers``: how the token mixers' cost grows with T. Prints

1. forward+backward time of full causal attention, blockwise SWA and dense masked SWA at
   several sequence lengths with the number of tokens per batch fixed, and their ratios;
2. forward+backward time of the chunked recurrent scans against the sequential per-token
   scans, with the number of tokens per batch fixed.
"""

import json

import jax
import jax.numpy as jnp

from hybrid_jax.bench.timing import best_seconds
from hybrid_jax.cli_args import ArgumentParser
from pallas_kernels.delta_rule import api as delta_api
from pallas_kernels.linear_scan import api as scan_api
from pallas_kernels.swa import api


def _normal_inputs(seed, *shapes):
  keys = jax.random.split(jax.random.PRNGKey(seed), len(shapes))
  return [jax.random.normal(key, shape) for key, shape in zip(keys, shapes)]


def _attention_fwd_bwd(impl, window):

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
    row["full_s"] = best_seconds(_attention_fwd_bwd("full", None), q, k, v, reps=reps)
    row["swa_s"] = best_seconds(_attention_fwd_bwd("xla", window), q, k, v, reps=reps)
    if t in dense_at:
      row["dense_masked_swa_s"] = best_seconds(_attention_fwd_bwd("reference", window), q, k, v, reps=reps)
    rows.append(row)
    print(json.dumps(row), flush=True)
  return rows


def _recurrent_fwd_bwd(op, impl, chunk):

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
        row[key] = best_seconds(_recurrent_fwd_bwd(op, impl, chunk), q, k, v, g, beta, reps=reps)
      rows.append(row)
      print(json.dumps(row), flush=True)
  return rows


def main(argv=None):
  p = ArgumentParser(prog="hybrid-jax bench mixers", description=__doc__.strip())
  p.add_argument("--lengths", default="1024,2048,4096,8192,16384",
                 help="attention: comma-separated sequence lengths T")
  p.add_argument("--tokens", type=int, default=16384, help="B*T of every batch")
  p.add_argument("--window", type=int, default=128, help="SWA window")
  p.add_argument("--heads", type=int, default=2, help="attention query heads")
  p.add_argument("--kv-heads", type=int, default=2, help="attention key/value heads")
  p.add_argument("--head-dim", type=int, default=64,
                 help="attention head dim; the scans' key and value dims")
  p.add_argument("--reps", type=int, default=2, help="timed repetitions (the best counts)")
  p.add_argument("--recurrent-lengths", default="1024,4096,16384",
                 help="scans: comma-separated sequence lengths T")
  p.add_argument("--chunk", type=int, default=64, help="the chunked scans' chunk length")
  p.add_argument("--skip", choices=["attention", "recurrent"], action="append", default=[],
                 help="leave out a part (repeatable) (default: none)")
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
  print("# summary")
  print(json.dumps(summary, indent=2))
  return summary
