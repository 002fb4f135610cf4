"""The paper-scale sweep files (experiments/paper_scale/) dry-run to the paper's grid: its
sizes (non-embedding parameters within 5% of the published counts), architectures, context,
token budgets, and a compute estimate that adds up."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid_jax.configs.sizes import PAPER_NON_EMBEDDING, SIZES
from hybrid_jax.launch import grid
from hybrid_jax.model.flops import model_flops_per_token

PAPER_SCALE = Path(__file__).parent.parent / "experiments" / "paper_scale"
BUDGETS = {100.0, 200.0, 300.0, 400.0, 500.0, 1000.0}


def planned(name):
  runs = grid.plan(grid.load_sweep(PAPER_SCALE / name))
  assert not [(r.name, r.error) for r in runs if r.error]
  return runs


def check_paper_shape(r):
  d = r.resolved.derived
  target = PAPER_NON_EMBEDDING[r.resolved.model.size]
  assert abs(d.non_embedding_params - target) <= 0.05 * target, (r.name, d.non_embedding_params)
  assert r.resolved.data.seq_len == 16384 and r.resolved.data.name == "mix"
  assert r.resolved.data.long_fraction == 0.5                  # the 1:1 long/short mixture
  assert abs(d.tokens / d.non_embedding_params - r.point["train.tokens_per_param"]) < 1.0


def test_scaling_grid_is_the_papers():
  runs = planned("scaling.py")
  assert len(runs) == 5 * 7 * 6
  for r in runs:
    check_paper_shape(r)
  archs = {(r.resolved.model.pattern, r.resolved.model.window if "S" in r.resolved.model.pattern else None)
           for r in runs}
  assert archs == {("F", None), ("SF", 128), ("SF", 512), ("SF", 2048), ("LF", None), ("MF", None),
                   ("GF", None)}
  assert {r.resolved.model.size for r in runs} == set(PAPER_NON_EMBEDDING)
  assert {r.point["train.tokens_per_param"] for r in runs} == BUDGETS
  # Full attention at the odd layers of the 1:1 hybrids (layers 1, 3, ...).
  for r in runs:
    letters = r.resolved.derived.layers
    if r.resolved.model.pattern != "F":
      assert all(letters[i] == "F" for i in range(1, len(letters), 2)), letters
      assert all(letters[i] != "F" for i in range(0, len(letters), 2)), letters


def test_variants_are_the_papers():
  runs = planned("variants.py")
  for r in runs:
    check_paper_shape(r)
  patterns = {(r.resolved.model.pattern, r.resolved.model.window) for r in runs}
  assert ("SSSF", 128) in patterns and ("H", 128) in patterns
  one_three = [r for r in runs if r.resolved.model.pattern == "SSSF"]
  assert all(r.resolved.derived.layers.count("F") * 4 == len(r.resolved.derived.layers)
             for r in one_three)
  nope = [r for r in runs if r.resolved.model.size == "S5" and r.resolved.model.pattern == "SF"]
  assert sorted(r.resolved.model.pos_full for r in nope) == ["nope", "rope"]
  assert {r.resolved.model.pos_swa for r in nope} == {"rope"}       # NoPE on the full layers only
  for r in nope:                                                      # ~100B tokens
    assert 0.9e11 <= r.resolved.derived.tokens <= 1.1e11, r.resolved.derived.tokens


def independent_flops_per_token(size: str, pattern: str, window: int, t: int, vocab: int) -> float:
  """6 x matmul weights + attention scores/values on the keys each query sees, counted from
  the size table by hand (not through the config machinery)."""
  s = SIZES[size]
  dh = s.d_model // s.n_heads
  letters = (pattern * s.n_layers)[:s.n_layers]
  per_layer_attn = 2 * s.d_model * s.n_heads * dh + 2 * s.d_model * s.n_kv_heads * dh
  n_matmul = s.n_layers * (per_layer_attn + 3 * s.d_model * s.d_ff) + vocab * s.d_model
  keys = {"F": (t + 1) / 2,
          "S": sum(min(i + 1, window) for i in range(t)) / t}
  attn = sum(12 * dh * s.n_heads * keys[letter] for letter in letters)
  return 6 * n_matmul + attn


@pytest.mark.parametrize("size,pattern,window", [("S1", "F", 128), ("S3", "SF", 2048)])
def test_flop_estimate_matches_a_hand_count(size, pattern, window):
  run = next(r for r in planned("scaling.py")
             if r.resolved.model.size == size and r.resolved.model.pattern == pattern
             and (pattern == "F" or r.resolved.model.window == window))
  c = run.resolved
  want = independent_flops_per_token(size, pattern, window, c.data.seq_len, c.model.vocab_size)
  # The size table's d_ff is the published shape's; the config may re-match d_ff, so allow
  # the difference that the MLP rounding can make.
  assert model_flops_per_token(c) == pytest.approx(want, rel=0.02)


def test_dry_run_totals_add_up(tmp_path):
  """The CLI's dry run prints every run and totals equal to the sum of its rows."""
  root = tmp_path / "root"
  r = subprocess.run([sys.executable, "-m", "hybrid_jax.cli", "sweep", "submit",
                      str(PAPER_SCALE / "scaling.py"), "--root", str(root), "--dry-run"],
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  lines = r.stdout.strip().splitlines()
  runs = planned("scaling.py")
  m = re.match(r"(\d+) runs, ([\d,]+) tokens, ([\d.e+]+) FLOPs in all", lines[-1])
  assert m, lines[-1]
  assert int(m.group(1)) == len(runs) == 210
  tokens = sum(r.resolved.derived.tokens for r in runs)
  assert int(m.group(2).replace(",", "")) == tokens
  flops = sum(model_flops_per_token(r.resolved) * r.resolved.derived.tokens for r in runs)
  assert float(m.group(3)) == pytest.approx(flops, rel=1e-2)
  assert 1e21 < flops < 1e24                        # 100N..1000N of 15M..477M at 16K context
  assert not root.exists()


def test_committed_plan_covers_the_grid_every_run_fits_and_keeps_its_batch():
  """The plan in experiments/paper_scale/plans was made from the configs the sweep makes now
  (a changed paper config must be planned again), and every run fits a v5p chip with the
  configured global batch (a microbatch change divides it; nothing else changed)."""
  import json
  from hybrid_jax.overrides import parse as parse_overrides
  from hybrid_jax.plan.runs import config_hash

  class V5p:
    name = "v5p:2x2x1"
  path = PAPER_SCALE / "plans" / "scaling.v5p_2x2x1.plan.jsonl"
  records = {r["run"]: r for r in map(json.loads, path.read_text().splitlines())}
  runs = grid.plan(grid.load_sweep(PAPER_SCALE / "scaling.py"),
                   parse_overrides(["--config.mesh.data=1", "--config.mesh.fsdp=-1"]))
  assert len(runs) == 210 and set(records) == {r.name for r in runs}
  for r in runs:
    rec = records[r.name]
    assert rec["config_hash"] == config_hash(r.resolved, V5p), f"{r.name}: planned from another config"
    assert rec["fits"] and rec["status"].startswith("fits") and rec["remat"] == "none", r.name
    assert rec["batch_size"] == r.resolved.train.batch_size and rec["batch_size"] % rec["microbatches"] == 0
    assert rec["change"] in (None, f"train.microbatches={rec['microbatches']}")
    assert rec["hbm_total_bytes"] <= rec["hbm_budget_bytes"]


def test_committed_bpe_plan_has_no_input_bound_run():
  """Issue 43's target, as `sweep plan ... --resume --config.data.corpus=data/pydocs
  --config.data.tokenizer=data/pydocs` recorded it: every run of the grid has an input time
  per step (32K BPE ids, its host's workers) and none is slower than its roofline step."""
  import json
  path = PAPER_SCALE / "plans" / "scaling.v5p_2x2x1.bpe32k_pydocs.plan.jsonl"
  records = list(map(json.loads, path.read_text().splitlines()))
  assert len(records) == 210
  for r in records:
    assert r["input_s"] > 0 and r["input_workers"] >= 1, r["run"]
    assert r["input_bound"] == (r["input_s"] > r["step_s"]) and not r["input_bound"], r["run"]
