"""The kernel benchmark runs on CPU (XLA path and the library attention) and counts FLOPs on
the unmasked work only."""

import numpy as np
import pytest

from hybrid_jax.bench import kernels as bench
from hybrid_jax.cli_args import run_tool
from pallas_kernels.swa.reference import band_mask


@pytest.mark.parametrize("t,window", [(16, 1), (16, 5), (16, 16), (16, 40)])
def test_swa_flops_count_the_band_only(t, window):
  keys = int(np.asarray(band_mask(t, t, window)).sum())       # independent: the dense mask
  assert bench.swa_flops(2, t, 3, 8, window) == 4 * 2 * 3 * 8 * keys


def test_bench_prints_every_op_with_ratios(capsys):
  rows = bench.main(["--lengths", "64", "--windows", "16", "--reps", "1", "--heads", "2",
                     "--kv-heads", "1", "--head-dim", "16", "--chunk", "16"])
  out = capsys.readouterr().out
  assert "interpret-mode times are not speed" in out
  got = {(r["op"], r["impl"]) for r in rows}
  assert got == {("swa", "xla"), ("swa", "jax.nn.dot_product_attention"), ("gla", "xla"),
                 ("delta", "xla")}
  for r in rows:
    assert r["fwd_ms"] > 0 and r["fwd_bwd_ms"] > 0 and r["fwd_bwd_tflops"] > 0
    assert r["fwd_bwd_speedup_vs_xla"] > 0
  lib = next(r for r in rows if r["impl"] == "jax.nn.dot_product_attention")
  xla = next(r for r in rows if r["op"] == "swa" and r["impl"] == "xla")
  assert lib["fwd_bwd_speedup_vs_xla"] == pytest.approx(xla["fwd_bwd_ms"] / lib["fwd_bwd_ms"])


def test_cpu_rows_bench_times_both_paths_per_shape(capsys, monkeypatch):
  monkeypatch.setattr(bench, "CPU_ROW_SHAPES", {"tiny S": (2, 24, 2, 1, 8, 8),
                                                "tiny F": (2, 24, 2, 1, 8, 24)})
  rows = bench.main(["--cpu-rows", "--reps", "1"])
  out = capsys.readouterr().out
  assert [r["shape"] for r in rows] == ["tiny S", "tiny F"]
  for r in rows:
    assert list(r["ms"]) == ["row by row", "whole batch"] and min(r["ms"].values()) > 0
    median, low, high = r["speedup_over_whole batch"]
    assert low <= median <= high
    assert f"{r['shape']:9s} B2 T24" in out


def test_cpu_keep_bench_times_kept_against_recomputed_probabilities(capsys, monkeypatch):
  monkeypatch.setattr(bench, "CPU_ROW_SHAPES", {"tiny F": (2, 24, 2, 1, 8, 24)})
  rows = bench.main(["--cpu-keep", "--reps", "1"])
  assert list(rows[0]["ms"]) == ["kept", "recomputed"] and min(rows[0]["ms"].values()) > 0
  median, low, high = rows[0]["speedup_over_recomputed"]
  assert low <= median <= high
  assert "kept over recomputed" in capsys.readouterr().out


def test_cpu_blocks_bench_times_the_default_block_against_half_and_twice(capsys, monkeypatch):
  """SWA w8: default 16 rows, timed beside 8 and 32; causal T24: default 64 rows (one
  block), and 32 beside it (twice it exceeds T)."""
  from pallas_kernels.swa import xla
  monkeypatch.setattr(bench, "CPU_ROW_SHAPES", {"tiny S": (1, 48, 2, 1, 8, 8),
                                                "tiny F": (1, 40, 2, 1, 8, 40)})
  rows = bench.main(["--cpu-blocks", "--reps", "1"])
  assert xla.default_block_size(48, 8) == 16 and xla.causal_block_size(40) == 64
  assert list(rows[0]["ms"]) == ["block 16", "block 8", "block 32"]
  assert list(rows[1]["ms"]) == ["block 64", "block 32"]
  for other in ("block 8", "block 32"):
    median, low, high = rows[0][f"speedup_over_{other}"]
    assert low <= median <= high
  assert "block 16 over block 8" in capsys.readouterr().out


def test_bench_rejects_bad_arguments(capsys):
  for bad in (["--ops", "swa,conv"], ["--windows", "0"]):
    assert run_tool(bench.main, bad) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1, bad


def test_gpu_spills_without_the_gpu_compiler_is_one_line_saying_how_to_install(capsys,
                                                                              monkeypatch):
  from pallas_kernels import targets
  monkeypatch.setattr(targets, "missing", lambda platform: "the CUDA PJRT plugin is not "
                      "installed; " + targets.gpu_install_hint())
  assert run_tool(bench.main, ["--gpu-spills"]) == 2
  err = capsys.readouterr().err.strip().splitlines()[-1]
  assert "--gpu-spills: the CUDA PJRT plugin is not installed" in err and "jax-cuda12-plugin" in err


def test_causal_xla_report_refuses_an_unknown_topology_in_one_line(capsys):
  assert run_tool(bench.main, ["--causal-xla", "v9:2x2"]) == 2
  assert "--causal-xla: unknown topology 'v9:2x2'" in capsys.readouterr().err.strip().splitlines()[-1]


def test_library_baseline_computes_the_same_window():
  """The benchmark's comparison is like for like: local_window_size=(w-1, 0) is our window."""
  import jax
  from pallas_kernels.swa.reference import sliding_window_attention
  ks = jax.random.split(jax.random.PRNGKey(0), 3)
  q = jax.random.normal(ks[0], (1, 24, 4, 8))
  k, v = (jax.random.normal(key, (1, 24, 2, 8)) for key in ks[1:])
  for w in (1, 5, 24):
    got = jax.nn.dot_product_attention(q, k, v, is_causal=True, local_window_size=(w - 1, 0))
    np.testing.assert_allclose(got, sliding_window_attention(q, k, v, window=w), atol=1e-5)


def test_dispatch_hands_tpu_interpreter_options_to_the_tpu_kernel_only():
  from jax.experimental.pallas import tpu as pltpu
  from pallas_kernels import dispatch
  options = pltpu.InterpretParams(detect_races=True)
  assert dispatch.resolve("pallas_tpu", options) == ("pallas_tpu", options)
  assert dispatch.resolve("pallas_gpu", options) == ("pallas_gpu", True)
  assert dispatch.resolve("pallas_tpu") == ("pallas_tpu", True)           # CPU: interpreted
  assert dispatch.resolve("pallas_gpu", False) == ("pallas_gpu", False)   # lowering only
  assert dispatch.resolve("xla", options) == ("xla", False)
