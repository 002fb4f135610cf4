"""``plan`` sets each run's input time per step on the topology's hosts beside its roofline
step time and flags the runs input bounds; its config hash ignores the data keys the compile
ignores, so changing them keeps a plan's records (which still get fresh input figures).

No compile: records are made by hand or kept from an earlier plan, and the batch time is
fixed (``input_cost.batch_seconds``) so every figure is exact."""

import json

import pytest

from conftest import tiny_config
from hybrid_jax.data import input_cost
from hybrid_jax.plan.runs import config_hash, run_plans
from hybrid_jax.plan.report import table, totals, with_input
from hybrid_jax.plan.targets import CHIPS, Target, hosts
from hybrid_jax.resolve import resolve

BATCH_S = 0.8        # seconds for one whole batch on one core here


@pytest.fixture(autouse=True)
def fixed_batch_time(monkeypatch):
  monkeypatch.setattr(input_cost, "batch_seconds", lambda cfg, steps=3: BATCH_S)


def _target(name="v5p:2x2x1"):
  chip, shape = name.split(":")
  chips = 1
  for n in shape.split("x"):
    chips *= int(n)
  return Target(name, CHIPS[chip], chips, [object()] * chips)


def _cfg(**data):
  c = tiny_config()
  for k, v in data.items():
    c.data[k] = v
  return resolve(c)


def _column(text: str, name: str) -> list[str]:
  """The cells of one column of ``table``'s text (columns start where their heading does)."""
  head, *rows = text.splitlines()
  i = head.index(name)
  return [row[i:] if name == "status" else row[i:].split()[0] for row in rows]


def _fitting(name="r", step_s=0.1):
  return dict(run=name, status="fits", fits=True, step_s=step_s, chip_hours=1.0, steps=10,
              tokens=100, model_flops_per_step=1e9, n=1e6)


@pytest.mark.parametrize("topology,expected", [
    ("v5p:2x2x1", 1), ("v5p:2x2x2", 2), ("v4:4x4x4", 16), ("v5e:1x1", 1), ("v5e:2x2", 1),
    ("v5e:2x4", 1), ("v5e:4x4", 4), ("v6e:4x4", 4), ("v6e:16x16", 64), ("h100:8", 1),
    ("h200:1", 1)])
def test_hosts_are_the_chips_over_the_chips_of_one_host(topology, expected):
  """v5e/v6e slices past one 8-chip host are 4-chip hosts (Cloud TPU's and Ray's layout)."""
  assert hosts(_target(topology)) == expected


@pytest.mark.parametrize("topology,workers,input_s", [
    ("v5p:2x2x1", -1, BATCH_S / 16),         # one host, 16 workers (208 vCPUs: the cap)
    ("v5p:2x2x1", 4, BATCH_S / 4),
    ("v5p:2x2x1", 0, BATCH_S),                # in the training process: one core
    ("v5p:2x2x4", -1, BATCH_S / 4 / 16),      # 16 chips on 4 hosts: a quarter of the rows each
])
def test_input_time_is_the_batch_over_the_hosts_and_their_workers(topology, workers, input_s):
  target = _target(topology)
  rec = with_input(_fitting(), _cfg(workers=workers), target)
  assert rec["input_s"] == pytest.approx(input_s)
  assert rec["input_batch_s"] == BATCH_S
  assert rec["hosts"] == hosts(target)
  assert rec["host_vcpus"] == input_cost.host_vcpus("v5p", 4) == 208
  assert rec["input_workers"] == (16 if workers == -1 else max(1, workers))


def test_input_bound_flips_exactly_where_input_time_passes_step_time():
  cfg, target = _cfg(workers=4), _target()        # input_s = 0.8 / 4 = 0.2
  input_s = with_input(_fitting(), cfg, target)["input_s"]
  assert input_s == pytest.approx(0.2)
  below, at, above = input_s * (1 - 1e-9), input_s, input_s * (1 + 1e-9)
  assert with_input(_fitting(step_s=above), cfg, target)["input_bound"] is False
  assert with_input(_fitting(step_s=at), cfg, target)["input_bound"] is False
  assert with_input(_fitting(step_s=below), cfg, target)["input_bound"] is True


def test_a_run_without_a_step_time_has_an_input_time_but_no_input_bound():
  rec = dict(run="big", status="does not fit", fits=False, reason="needs 99 GiB")
  out = with_input(rec, _cfg(), _target())
  assert out["input_s"] == pytest.approx(BATCH_S / 16) and out["input_bound"] is None
  invalid = dict(run="bad", status="invalid", fits=False, reason="model.window")
  assert with_input(invalid, None, _target()) == invalid


def test_a_source_that_cannot_be_made_here_is_an_input_error_not_a_failed_plan(monkeypatch):
  def unreadable(cfg, steps=3):
    raise FileNotFoundError("data/c4/manifest.json")
  monkeypatch.setattr(input_cost, "batch_seconds", unreadable)
  out = with_input(_fitting(), _cfg(), _target())
  assert out["input_s"] is None and out["input_bound"] is None
  assert out["input_error"].startswith("FileNotFoundError: data/c4")
  assert _column(table([out]), "input s") == ["-"] and _column(table([out]), "status") == ["fits"]


def test_table_shows_input_seconds_and_flags_input_bound_runs():
  cfg, target = _cfg(workers=3), _target()        # input_s = 0.8 / 3 = 0.2667
  fast = with_input(_fitting("fast", step_s=1.0), cfg, target)
  slow = with_input(_fitting("slow", step_s=0.1), cfg, target)
  text = table([fast, slow])
  assert _column(text, "step s") == ["1", "0.1"]
  assert _column(text, "input s") == ["0.267", "0.267"]        # 3 significant digits
  assert _column(text, "status") == ["fits", "fits, input-bound"]
  assert totals([fast, slow])["input_bound"] == 1
  assert totals([fast])["input_bound"] == 0


@pytest.mark.parametrize("key,value", [
    ("data.corpus", "data/c4"), ("data.tokenizer", "data/c4/tokenizer.model"),
    ("data.workers", 0), ("data.prefetch", 8), ("derived.data_fingerprint", "0123456789ab"),
    ("checkpoint.root", "gs://bucket/ckpts")])
def test_config_hash_ignores_what_the_compile_ignores(key, value):
  cfg, target = _cfg(), _target()
  before = config_hash(cfg, target)
  section, leaf = key.split(".")
  cfg[section][leaf] = value
  assert config_hash(cfg, target) == before


@pytest.mark.parametrize("key,value", [
    ("data.seq_len", 64), ("train.batch_size", 8), ("data.name", "mix"), ("model.vocab_size", 512)])
def test_config_hash_changes_with_what_the_compile_reads(key, value):
  cfg, target = _cfg(), _target()
  before = config_hash(cfg, target)
  section, leaf = key.split(".")
  cfg[section][leaf] = value
  assert config_hash(cfg, target) != before


def test_config_hash_leaves_the_config_alone():
  cfg = _cfg()
  config_hash(cfg, _target())
  assert cfg.data.workers == -1 and cfg.data.prefetch == 2 and cfg.data.tokenizer == "byte"


def test_a_kept_record_gets_fresh_input_figures(tmp_path, capsys):
  """--resume keeps a record planned before the input model (or on another host model):
  nothing compiles, but its input figures are the model's now."""
  target = _target()
  cfg = _cfg(workers=4)                            # input_s = 0.2 > step_s
  key = config_hash(cfg, target)
  out = tmp_path / "p.jsonl"
  old = dict(_fitting("kept", step_s=0.1), config_hash=key)
  out.write_text(json.dumps(dict(old, input_s=0.001, input_bound=False)) + "\n")
  logs = []
  (rec,) = run_plans("plan", [("kept", cfg, None)], target, out, log=logs.append, resume=True)
  assert rec["input_s"] == pytest.approx(0.2) and rec["input_bound"] is True
  assert rec["hosts"] == 1 and rec["host_vcpus"] == 208 and rec["input_workers"] == 4
  assert {k: rec[k] for k in old} == old          # the planned figures are kept as they were
  assert json.loads(out.read_text()) == rec
  assert "kept from before" in logs[0] and "input-bound" in logs[0]
  summary = capsys.readouterr().out.strip().splitlines()[-1]
  assert "1 input-bound (input per step on 1 host of 208 vCPUs, 4 workers each)" in summary
  assert "0 compiles, 1 records kept from before" in summary


def test_a_hosts_vcpus_follow_its_chip_count():
  """A one-chip v5e host has 24 vCPUs, not the 8-chip host's 224."""
  assert input_cost.host_vcpus("v5e", 1) == 24
  assert input_cost.host_vcpus("v5e", 4) == 112 and input_cost.host_vcpus("v5e", 8) == 224
  assert input_cost.host_vcpus("v5p", 4) == 208 and input_cost.host_vcpus("h100", 1) == 208
