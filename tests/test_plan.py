"""Deviceless compiles for TPU topologies (libtpu on a CPU host) and 8 H100s (the CUDA plugin):
the full train step of every mixer compiles, with the target's Pallas kernels (``auto``) each
on its device's rows, on one chip and on a 4-chip FSDP mesh within a recorded memory budget, remat
and microbatches cut its memory, bf16 compute keeps fp32 master weights, and ``hybrid-jax
plan`` reports, fits and fails as documented.

Shapes are the smallest that prove each point (CI runs on 2 cores); ``hybrid-jax sweep plan``
compiles the paper sizes. Budgets: ``tests/plan_budgets.json``; after an intended change,
rerun with ``HYBRID_JAX_RECORD_BUDGETS=1`` to record new ones.
"""

import dataclasses
import importlib.util
import json
import os
from pathlib import Path

import jax
import numpy as np
import pytest

from conftest import tiny_config
from hybrid_jax.resolve import resolve
from pallas_kernels import targets

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                reason='libtpu is not installed (pip install "jax[tpu]==<jax version>")')

BUDGETS = Path(__file__).parent / "plan_budgets.json"
SLACK = 1.10                     # a compile may use 10% more than recorded before it fails
LETTERS = "FSHMGL"
# (pattern, implementation, chips) compiled: every mixer alone with its TPU kernels on a 4-chip
# FSDP mesh (the production path), and one model of all six mixers on one chip with each
# implementation (all mixers in one compile: CI runs on 2 cores).
CASES = [(letter, "auto", 4) for letter in LETTERS] + [(LETTERS, "xla", 1), (LETTERS, "auto", 1)]


@pytest.fixture(scope="module")
def one_chip():
  from hybrid_jax.plan.targets import target
  return target("v5e:1x1")


@pytest.fixture(scope="module")
def four_chips():
  from hybrid_jax.plan.targets import target
  return target("v5e:2x2")


def _cfg(pattern, impl="auto", fsdp=1, seq_len=128, **train):
  c = tiny_config(pattern, steps=10, local_head_fraction=0.5)
  c.model.n_layers = max(2, len(pattern))
  c.model.attention_impl = c.model.recurrent_impl = impl
  c.model.dtype = "bfloat16"
  c.data.seq_len = seq_len
  c.train.batch_size = 8
  c.mesh.data, c.mesh.fsdp = (1, fsdp) if fsdp > 1 else (-1, 1)
  for k, v in train.items():
    section, leaf = k.split("__")
    c[section][leaf] = v
  return resolve(c)


@pytest.fixture(scope="module")
def compiled(one_chip, four_chips):
  """compile_step of ``_cfg(pattern, impl, chips)``, once per module (tests share compiles)."""
  from hybrid_jax.plan.compile import compile_step
  cache = {}

  def get(pattern, impl, chips):
    if (pattern, impl, chips) not in cache:
      target = one_chip if chips == 1 else four_chips
      cache[pattern, impl, chips] = compile_step(_cfg(pattern, impl, fsdp=chips), target.devices)
    return cache[pattern, impl, chips]
  return get


def _check_budget(key: str, hbm_bytes: int):
  budgets = json.loads(BUDGETS.read_text()) if BUDGETS.exists() else {}
  if os.environ.get("HYBRID_JAX_RECORD_BUDGETS"):
    budgets[key] = hbm_bytes
    BUDGETS.write_text(json.dumps(budgets, indent=1, sort_keys=True) + "\n")
    return
  assert key in budgets, f"no recorded budget for {key}: run with HYBRID_JAX_RECORD_BUDGETS=1"
  assert hbm_bytes <= SLACK * budgets[key], (
      f"{key}: {hbm_bytes} bytes per device, recorded budget {budgets[key]} (memory regression)")


def _kernel_rows(executable, names=("tpu_custom_call",)) -> set:
  """The leading dimension of every result of every Pallas custom call in the program."""
  calls = targets.custom_call_shapes(executable.as_text(), names=names)
  return calls, {s[0] for _, shapes in calls for s in shapes if s}


@pytest.mark.parametrize("pattern,impl,chips", CASES)
def test_train_step_of_every_mixer_compiles_within_budget(pattern, impl, chips, compiled):
  c = compiled(pattern, impl, chips)
  assert c.hbm_bytes > c.argument_bytes > 0 and c.compiler_flops and c.compiler_flops > 0
  assert c.batch_axes == ("data", "fsdp")
  _check_budget(f"{pattern}/{impl}/{chips}chip", c.hbm_bytes)
  calls, rows = _kernel_rows(c.executable)
  if impl == "xla":
    assert not calls, calls
  else:     # auto on a TPU target: the Mosaic kernels, each on its device's 8 / chips rows
    assert calls and rows == {8 // chips}, (calls, rows)


@pytest.mark.skipif(targets.missing("gpu") is not None,
                    reason=f"cannot compile for GPU: {targets.missing('gpu')}")
def test_train_step_on_eight_h100s_runs_every_kernel_per_device():
  """On an 8-GPU FSDP mesh each Triton call gets its GPU's 16 / 8 = 2 rows, not the
  all-gathered batch (what the step did before it traced under its mesh)."""
  from hybrid_jax.plan.compile import compile_step
  from hybrid_jax.plan.targets import target
  gpus = target("h100:8")
  cfg = _cfg(LETTERS, "auto", fsdp=8, train__batch_size=16)
  c = compile_step(cfg, gpus.devices)
  calls, rows = _kernel_rows(c.executable, names=("__gpu$xla.gpu.triton",))
  assert calls and rows == {2}, (calls, rows)
  assert c.batch_axes == ("data", "fsdp")


def test_fsdp_splits_the_state_and_bf16_compute_keeps_fp32_master_weights(four_chips, compiled):
  """The compiled step's state arguments are float32 and split over 4 chips; its matmuls
  run in bfloat16."""
  from hybrid_jax.plan.compile import abstract_step_inputs
  from hybrid_jax.train import sharding
  cfg = _cfg("S", fsdp=4)
  mesh = sharding.make_mesh(cfg.mesh, four_chips.devices)
  _, _, _, state, _, _ = abstract_step_inputs(cfg, mesh)
  params = jax.tree.leaves(state["params"])
  assert {str(p.dtype) for p in params} == {"float32"}
  c = compiled("S", "auto", 4)
  lines = c.executable.as_text().splitlines()
  matmuls = [l.split("=", 1)[1].strip() for l in lines if " dot(" in l or " convolution(" in l]
  assert matmuls and any(m.startswith("bf16[") for m in matmuls)     # TPU HLO: result types
  in_params = c.executable.input_shardings[0][0]["params"]
  split = [p for s, p in zip(jax.tree.leaves(in_params), params)
           if s.shard_shape(p.shape) != tuple(p.shape)]
  assert split, "FSDP split no parameter"
  # the compiled step holds under 60% of the state per chip (small arrays stay whole)
  whole = sum(np.prod(p.shape) * p.dtype.itemsize for p in params)
  held = sum(np.prod(s.shard_shape(p.shape)) * p.dtype.itemsize
             for s, p in zip(jax.tree.leaves(in_params), params))
  assert held < 0.6 * whole, (held, whole)


@pytest.mark.slow   # ~3 min of TPU compiles; tests/test_accumulate_remat.py checks the cut on CPU
def test_remat_and_microbatches_cut_temporaries_on_tpu(one_chip):
  from hybrid_jax.plan.compile import compile_step
  long = dict(seq_len=1024)
  base = compile_step(_cfg("F", **long), one_chip.devices)
  full = compile_step(_cfg("F", model__remat="full", **long), one_chip.devices)
  micro = compile_step(_cfg("F", train__microbatches=4, **long), one_chip.devices)
  assert full.temp_bytes < 0.8 * base.temp_bytes
  assert micro.temp_bytes < 0.6 * base.temp_bytes
  assert micro.argument_bytes == base.argument_bytes       # the same global batch and state


def test_a_batch_smaller_than_the_mesh_is_replicated_over_fsdp(four_chips):
  from hybrid_jax.plan.compile import compile_step
  cfg = _cfg("S", "xla", fsdp=4, train__batch_size=2)
  c = compile_step(cfg, four_chips.devices)
  assert c.batch_axes == ()


def test_plan_finds_the_microbatches_that_fit_and_keeps_the_batch(one_chip, tmp_path, capsys):
  """A batch whose logits alone overflow a v5e chip: plan reports the change that fits."""
  from hybrid_jax.plan.runs import run_plans
  c = tiny_config("SF", steps=10)
  c.model.vocab_size = 2 ** 20              # f32 logits [64, 64, 2^20]: 16 GiB, and their gradient
  c.data.seq_len, c.train.batch_size = 64, 64   # (short rows: the scanned step compiles fast)
  c.model.attention_impl = c.model.recurrent_impl = "xla"
  cfg = resolve(c)
  out = tmp_path / "plan.jsonl"
  (rec,) = run_plans("plan", [("big-logits", cfg, None)], one_chip, out, log=lambda m: None)
  assert json.loads(out.read_text()) == rec
  assert rec["fits"] and rec["change"].startswith("train.microbatches=")
  assert rec["batch_size"] == 64 and rec["microbatches"] > 1
  assert rec["hbm_total_bytes"] <= rec["hbm_budget_bytes"]
  assert rec["chip_hours"] > 0 and rec["step_s"] > 0
  assert "fits with train.microbatches=" in capsys.readouterr().out


def test_runs_that_differ_only_in_budget_share_one_compile(one_chip, tmp_path):
  from hybrid_jax.plan.runs import run_plans
  from hybrid_jax.plan.fit import shape_key
  runs = []
  for tokens in (20_000, 40_000):
    c = tiny_config("SF", steps=None)
    c.model.attention_impl = c.model.recurrent_impl = "xla"
    c.train.tokens = tokens
    runs.append((f"t={tokens}", resolve(c), None))
  assert shape_key(runs[0][1]) == shape_key(runs[1][1])
  bad = ("bad", None, "config.model.window: must be an integer >= 1 (got 0)")
  recs = run_plans("plan", runs + [bad], one_chip, tmp_path / "p.jsonl", log=lambda m: None)
  assert [r["reused_compile"] for r in recs[:2]] == [False, True]
  assert recs[0]["hbm_total_bytes"] == recs[1]["hbm_total_bytes"]
  assert recs[1]["steps"] == 2 * recs[0]["steps"]
  assert np.isclose(recs[1]["chip_hours"], 2 * recs[0]["chip_hours"])
  assert recs[2]["status"] == "invalid" and "model.window" in recs[2]["reason"]


def test_an_interrupted_plan_resumes_without_recompiling_what_it_kept(one_chip, tmp_path):
  from hybrid_jax.plan.runs import run_plans

  def runs(window):
    out = []
    for tokens in (20_000, 40_000):
      c = tiny_config("SF", steps=None)
      c.model.attention_impl = c.model.recurrent_impl = "xla"
      c.model.window, c.train.tokens = window, tokens
      out.append((f"t={tokens}", resolve(c), None))
    return out

  out = tmp_path / "p.jsonl"
  first = run_plans("plan", runs(8)[:1], one_chip, out, log=lambda m: None)
  out.rename(str(out) + ".partial")           # as if killed after the first record
  with open(str(out) + ".partial", "a") as f:
    f.write('{"run": "t=40000", "torn')      # the record being written when it died
  logs = []
  again = run_plans("plan", runs(8), one_chip, out, log=logs.append, resume=True)
  assert again[0] == first[0] and "kept from before" in logs[0]
  assert again[1]["status"] == "fits" and again[1]["reused_compile"] is False
  assert not (tmp_path / "p.jsonl.partial").exists()
  changed = run_plans("plan", runs(16), one_chip, out, log=lambda m: None, resume=True)
  assert changed[0]["config_hash"] != first[0]["config_hash"]  # a changed config is planned again
  assert changed[0]["window"] == 16
