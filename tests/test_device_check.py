"""The pieces of ``python -m hybrid_jax.bench.device_check`` that run on CPU (the whole command
needs a GPU or TPU): the refusal, the kernel-against-XLA comparison, the timing rows and the
short training run, at tiny shapes."""

import jax.numpy as jnp
import numpy as np
import pytest

from hybrid_jax.bench import device_check
from hybrid_jax.cli_args import run_tool


def test_refuses_on_cpu_with_one_line(capsys, tmp_path):
  out = tmp_path / "r.json"
  assert device_check.main(["--out", str(out)]) == 2
  err = capsys.readouterr().err.strip()
  assert "needs a GPU or TPU" in err and "\n" not in err
  assert not out.exists()


@pytest.mark.parametrize("op", device_check.OPS)
def test_compare_passes_an_interpreted_kernel_and_catches_a_wrong_one(op):
  args = device_check.inputs(op, 1, 40, 2, 16, jnp.float32)
  row = device_check.compare(op, "pallas_tpu", args, window=8)
  assert row["ok"] and len(row["gradients"]) == len(args), row
  if op == "swa":           # the comparison can fail: another window is far off
    off = device_check.max_relative_error(
        device_check.op_fn(op, "xla", 8)(*args), device_check.op_fn(op, "xla", 4)(*args))
    assert off > device_check.TOLERANCE["float32"]


def test_rejects_unknown_sections_before_any_compute(capsys, tmp_path):
  assert run_tool(device_check.main, ["--out", str(tmp_path / "r.json"),
                                      "--sections", "training,speed"]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "--sections" in err[0], err
  assert not (tmp_path / "r.json").exists()


def test_past_the_budget_rows_are_listed_as_skipped_and_the_file_says_incomplete(
    monkeypatch, tmp_path):
  """With a spent budget nothing runs (so this works on CPU, posing as a TPU host): every row
  of the chosen sections is named in ``skipped``, in order, and the check fails."""
  import json
  monkeypatch.setattr(device_check.dispatch, "target_platform", lambda: "tpu")
  out = tmp_path / "r.json"
  assert device_check.main(["--out", str(out), "--budget-s", "0", "--lengths", "64,128",
                            "--sections", "training,timing"]) == 1
  report = json.loads(out.read_text())
  assert [r["section"] for r in report["skipped"]] == ["training"] * 3 + ["timing"] * 12
  assert [r.get("pattern") for r in report["skipped"][:3]] == ["SF", "GF", "MF"]
  assert report["ok"] is False and "15 rows skipped" in report["incomplete"]
  assert report["training"] == report["timing"] == report["correctness"] == []


def test_timing_runs_every_kernel_before_the_xla_baselines_and_causal_xla_attention_last():
  """A machine's time limit that comes during a slow XLA baseline's compile (the blockwise
  causal attention: 81 s for its forward on an H200) costs no kernel timing: the kernels
  (and cuDNN's attention, beside the SWA kernel) run at every length first, the XLA
  baselines after, the attention one at w >= T last."""
  import argparse
  args = argparse.Namespace(heads=2, head_dim=16, window=96, reps=1)
  rows = [what for _, what in device_check.section_rows("timing", args, [64, 128])]
  as_tuples = [(w["implementation"], w["op"], w["t"]) for w in rows]
  assert as_tuples == (
      [("auto", op, t) for t in (64, 128) for op in device_check.OPS]
      + [("xla", "gla", 64), ("xla", "delta", 64), ("xla", "swa", 128), ("xla", "gla", 128),
         ("xla", "delta", 128), ("xla", "swa", 64)])


def test_on_a_gpu_the_scans_earlier_layout_is_timed_after_the_kernels():
  """The split of the scan kernels' state (not timed on a GPU when it was made) gets its
  A/B on the next GPU: the whole-state layout's rows come right after the kernels', before
  the XLA baselines; other platforms have no such rows."""
  import argparse
  args = argparse.Namespace(heads=2, head_dim=16, window=96, reps=1)
  rows = lambda platform: [(w["implementation"], w["op"], w["t"]) for _, w in
                           device_check.section_rows("timing", args, [64, 128], platform)]
  whole = device_check.WHOLE_STATE
  gpu, tpu = rows("gpu"), rows("tpu")
  assert gpu[6:10] == [(whole, op, t) for t in (64, 128) for op in ("gla", "delta")]
  assert gpu[:6] + gpu[10:] == tpu and not any(r[0] == whole for r in tpu)
  timed = device_check.time_op("gla", device_check.inputs("gla", 1, 32, 2, 16, jnp.float32), 32,
                               (whole,), reps=1)
  assert [r["implementation"] for r in timed] == [whole] and timed[0]["fwd_bwd_ms"] > 0


def test_whole_state_layout_traces_the_gpu_kernels_as_before_the_split():
  """Inside ``layout(None, 4)`` a head's state is one program of 4 warps; after it, blocks of
  64 columns in 8 warps again (read from the traced pallas_call's grid)."""
  import re

  import jax
  from pallas_kernels.linear_scan import pallas_gpu
  args = device_check.inputs("gla", 1, 64, 2, 128, jnp.float32)
  fn = lambda: str(jax.make_jaxpr(lambda *a: device_check.op_fn("gla", "pallas_gpu")(*a))(*args))
  with pallas_gpu.layout(None, 4):
    inside = fn()
  after = fn()
  grids = lambda text: set(re.findall(r"GridMapping\(grid=(\([0-9, ]*\))", text))
  warps = lambda text: set(re.findall(r"num_warps=(\d+)", text))
  assert grids(inside) == {"(1, 2, 1)"} and warps(inside) == {"4"}
  assert grids(after) == {"(1, 2, 2)"} and warps(after) == {"8"}


def test_speedups_pair_rows_timed_apart():
  rows = [dict(op="swa", t=64, window=32, implementation="auto", fwd_bwd_ms=2.0),
          dict(op="swa", t=64, window=32, implementation="jax.nn.dot_product_attention",
               fwd_bwd_ms=4.0),
          dict(op="gla", t=64, window=64, implementation="auto", fwd_bwd_ms=1.0),
          dict(op="swa", t=64, window=32, implementation="xla", fwd_bwd_ms=3.0),
          dict(op="swa", t=128, window=32, implementation="auto", error="no kernel")]
  device_check.add_speedups(rows)
  assert [r.get("fwd_bwd_speedup_vs_xla") for r in rows] == [1.5, 0.75, None, 1.0, None]


def test_max_relative_error():
  assert device_check.max_relative_error(np.array([1.0, 2.0]), np.array([1.0, 4.0])) == 0.5


def test_time_op_rows_have_times_and_ratios():
  args = device_check.inputs("swa", 1, 64, 2, 16, jnp.float32)
  rows = device_check.time_op("swa", args, 16, ("xla",), reps=1)
  names = [r["implementation"] for r in rows]
  assert names == ["xla", "jax.nn.dot_product_attention"]
  assert all(r["fwd_ms"] > 0 and r["fwd_bwd_ms"] > 0 for r in rows)
  assert rows[0]["fwd_bwd_speedup_vs_xla"] == 1.0
  alone = device_check.time_op("swa", args, 16, ("xla",), reps=1, dot_product_attention=False)
  assert [r["implementation"] for r in alone] == ["xla"]


def test_train_steps_records_losses():
  row = device_check.train_steps("SF", 3, 64, 2, size="toy-xs")
  assert row["state"] == "done" and len(row["losses"]) == 3
  assert all(np.isfinite(row["losses"]))


def test_committed_device_results_say_what_their_rows_hold():
  """Each committed device check's ``ok`` flags agree with its errors and the tolerances, and
  a run cut short says so (it cannot pass as complete)."""
  import json
  import pathlib
  files = sorted((pathlib.Path(device_check.__file__).parent / "results" / "device").glob("*.json"))
  assert files, "no committed device results"
  for f in files:
    report = json.loads(f.read_text())
    for row in report["correctness"]:
      if "error" not in row:
        worst = max([row["forward"]] + row["gradients"])
        assert row["ok"] == (worst <= device_check.TOLERANCE[row["dtype"]]), (f.name, row)
    all_rows = (len(report["training"]) == len(report["args"]["patterns"].split(","))
                and report["timing"] and not report.get("skipped"))
    assert all_rows or report.get("incomplete"), f.name       # a cut run says so
    complete = all_rows and not report.get("incomplete")      # e.g. cut inside the timing
    assert report["ok"] == (bool(complete) and all(
        r["ok"] for r in report["correctness"] + report["training"])), f.name
