"""`hybrid-jax bench` runs end to end on small shapes and reports its ratios."""

from hybrid_jax import bench


def test_bench_reports_attention_and_recurrent_ratios():
  summary = bench.main(["--skip", "training", "--lengths", "64,128", "--tokens", "128",
                        "--recurrent-lengths", "64,128", "--window", "16", "--reps", "1",
                        "--head-dim", "16"])
  assert summary["dense_masked_over_swa_at_T128"] > 0
  assert summary["simple_gla_chunked_time_per_token_T128_over_T64"] > 0
  assert summary["gated_delta_rule_sequential_over_chunked_at_T128"] > 0


def test_model_flops_count_the_band_only_for_swa_layers():
  from hybrid_jax.resolve import resolve
  from hybrid_jax.configs.default import get_config
  c = get_config()
  c.model.pattern = "F"
  full = bench.model_flops_per_token(resolve(c))
  c.model.pattern = "S"
  swa = bench.model_flops_per_token(resolve(c))
  assert swa < full
