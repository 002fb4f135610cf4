"""``hybrid-jax bench``: the mixers' scaling figures run end to end; the train bench builds
the peer's flags from the same config, profiles the step by named scope, takes its ratios
within rounds, and says in one line what is missing or wrong."""

import json
import os
import re
import sys

import jax
import numpy as np
import pytest

from hybrid_jax.bench import BenchError, mixers, profile, train, train_measure, train_workers
from hybrid_jax.commands import bench as cli


def test_mixers_report_attention_and_recurrent_ratios():
  summary = mixers.main(["--lengths", "64,128", "--tokens", "128", "--recurrent-lengths", "64,128",
                         "--window", "16", "--reps", "1", "--head-dim", "16"])
  assert summary["dense_masked_over_swa_at_T128"] > 0
  assert summary["simple_gla_chunked_time_per_token_T128_over_T64"] > 0
  assert summary["gated_delta_rule_sequential_over_chunked_at_T128"] > 0


def test_model_flops_count_the_band_only_for_swa_layers():
  from hybrid_jax.resolve import resolve
  from hybrid_jax.configs.default import get_config
  from hybrid_jax.model.flops import model_flops_per_token
  c = get_config()
  c.model.pattern = "F"
  full = model_flops_per_token(resolve(c))
  c.model.pattern = "S"
  assert model_flops_per_token(resolve(c)) < full


def test_peer_gets_the_same_network_and_batch_as_the_project():
  cfg = train.shape_config("d256-SSSF")
  args = dict(zip(train.peer_args(cfg)[::2], train.peer_args(cfg)[1::2]))
  assert args == {"--d-model": "256", "--layers": "4", "--heads": "4", "--kv-heads": "2",
                  "--d-ff": str(cfg.model.d_ff), "--vocab": "256", "--window": "128",
                  "--pattern": "SSSF", "--seq-len": "512", "--batch": "8"}
  toy = train.shape_config("toy")
  assert (toy.model.d_model, toy.model.n_layers, toy.model.pattern, toy.model.window,
          toy.data.seq_len, toy.train.batch_size) == (64, 4, "SF", 32, 256, 8)


def test_one_thread_pins_both_sides_to_one_core_and_every_core_leaves_them_alone(monkeypatch):
  """CPU affinity, not the XLA flags, is what XLA:CPU's thread pool obeys."""
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  assert "intra_op_parallelism_threads=1" in train.thread_env(1)["XLA_FLAGS"]
  assert "XLA_FLAGS" not in train.thread_env(0)
  assert train.thread_env(0)["JAX_PLATFORMS"] == "cpu"
  assert train.one_core(0) is None
  if hasattr(os, "sched_getaffinity"):
    probe = [sys.executable, "-c", 'import json, os; print(json.dumps({"cpus": sorted(os.sched_getaffinity(0))}))']
    assert train_workers._run(probe, train.thread_env(1), "probe", train.one_core(1)) == {"cpus": [train.one_core(1)]}


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two cores")
def test_processes_time_the_project_as_one_single_threaded_process_per_core():
  """``--processes 2``: a two-process JAX job on this host, data parallel, one core each,
  kept alive between blocks; process 0 answers."""
  project = [sys.executable, "-m", "hybrid_jax.bench.train", "--worker", "--shape", "toy",
             "--serve"]
  side = train.Measured("project workers (toy)", project, processes=2)
  try:
    assert side.ready["processes"] == 2 and side.ready["threads"] == 1
    assert side.block(2) > 0 and side.block(1) > 0          # every process runs each block
  finally:
    side.close()
  assert [p.returncode for p in side.procs] == [0, 0]         # end of input ends them


def test_the_torch_peer_serves_blocks_of_timed_steps():
  pytest.importorskip("torch")
  cmd = [sys.executable, "-m", train.PEER_MODULE, "--d-model", "32", "--layers", "2",
         "--heads", "2", "--kv-heads", "1", "--d-ff", "64", "--window", "8", "--seq-len", "16",
         "--batch", "2", "--steps", "3", "--threads", "1", "--serve"]
  side = train.Measured("torch eager peer (tiny)", cmd, dict(os.environ))
  try:
    assert side.ready == {"peer": "torch-eager", "threads": 1}
    assert side.block(3) > 0 and side.block(5) > 0        # more steps than its data: it cycles
  finally:
    side.close()
  assert side.procs[0].returncode == 0


class FakeSide:
  """A ``Measured`` that times nothing: each side's step seconds by name, and the call order
  (with the one-shot worker that fills the compilation cache, ``warm``)."""
  calls = []

  @staticmethod
  def warm(monkeypatch):
    FakeSide.calls = []
    monkeypatch.setattr(train, "Measured", FakeSide)
    monkeypatch.setattr(train, "project_row", lambda shape, steps, threads, breakdown_=False,
                        extra=(): (FakeSide.calls.append(("one-shot", shape, *extra))
                                   or dict(side="project")))

  def __init__(self, what, cmd, env=None, cpu=None, processes=1):
    self.name = ("torch-" + cmd[cmd.index("--mode") + 1] if "--mode" in cmd else
                 "project-no-donate" if "--no-donate" in cmd else
                 "project-cold" if "--cold" in cmd else
                 "project-plain-dots" if "--plain-dots" in cmd else "project")
    FakeSide.calls.append(("started", self.name))
    self.processes = processes
    self.ready = dict(threads=1 if processes > 1 else 2, processes=processes)

  def block(self, steps):
    FakeSide.calls.append((self.name, self.processes))
    return {"torch-eager": 0.3, "project-no-donate": 0.18, "project-cold": 0.2,
            "project-plain-dots": 0.165}.get(
        self.name, 0.1 if self.processes > 1 else 0.15)

  def close(self):
    FakeSide.calls.append(("closed", self.processes))


def test_processes_rounds_also_time_one_process_on_every_core(monkeypatch, capsys):
  """``--processes 2``: each round has the one-process project beside the N processes, and
  the summary gives their ratio."""
  FakeSide.warm(monkeypatch)
  monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
  assert cli.main(["train", "--shapes", "toy", "--processes", "2", "--rounds", "2",
                   "--warmup-rounds", "0", "--no-breakdown"]) == 0
  blocks = [p for name, p in FakeSide.calls if name == "project"]
  assert blocks == [2, 1, 1, 2]                  # the second round in reverse
  summary = json.loads(capsys.readouterr().out.split("# summary: median over rounds of each "
                                                     "within-round ratio\n")[1])
  assert summary["toy"]["project_over_project-1-process"] == 1.5


def test_rounds_alternate_the_order_of_the_sides_and_every_worker_is_closed(monkeypatch, capsys):
  """A one-shot worker first fills the compilation cache; then every other round runs the
  sides in reverse, so no side always runs first after the other sides' blocks; the ratios
  are per round."""
  FakeSide.warm(monkeypatch)
  monkeypatch.setattr(train, "torch_available", lambda: True)
  assert cli.main(["train", "--shapes", "toy", "--peer", "--rounds", "3", "--donation",
                   "--cold", "--no-breakdown", "--compile-shapes", "", "--warmup-rounds", "0"]) == 0
  sides = ["project", "project-no-donate", "project-cold", "torch-eager"]
  assert FakeSide.calls[0] == ("one-shot", "toy")
  assert FakeSide.calls[1:5] == [("started", n) for n in sides]
  names = [n for n, _ in FakeSide.calls[5:]]
  assert names == sides + sides[::-1] + sides + ["closed"] * 4
  out = capsys.readouterr().out
  rows = [json.loads(l) for l in out.splitlines() if l.startswith('{"side"')]
  assert [r["round"] for r in rows] == [0] * 4 + [1] * 4 + [2] * 4
  summary = json.loads(out.split("within-round ratio\n")[1])["toy"]
  assert summary["project_over_torch-eager"] == 2.0
  assert summary["project_over_project-no-donate"] == 1.2
  assert summary["project_over_project-cold"] == pytest.approx(1.333, abs=1e-3)


def test_warmup_rounds_are_printed_but_left_out_of_the_ratios(monkeypatch, capsys):
  """The first rounds after the workers start (``--warmup-rounds``, numbered below 0) run
  and print like the others, in the same alternating order, but no summary ratio reads them:
  here the project's warm-up blocks are ten times slower and the ratio is still the settled
  rounds' 2.0."""
  FakeSide.warm(monkeypatch)
  monkeypatch.setattr(train, "torch_available", lambda: True)
  settled = FakeSide.block
  def block(self, steps):
    warming = sum(1 for n, _ in FakeSide.calls if n == self.name) < 2
    return settled(self, steps) * (10 if warming and self.name == "project" else 1)
  monkeypatch.setattr(FakeSide, "block", block)
  assert cli.main(["train", "--shapes", "toy", "--peer", "--rounds", "3", "--warmup-rounds",
                   "2", "--no-breakdown", "--compile-shapes", ""]) == 0
  out = capsys.readouterr().out
  rows = [json.loads(l) for l in out.splitlines() if l.startswith('{"side"')]
  assert [(r["side"], r["round"], r.get("warmup", False)) for r in rows] == [
      ("project", -2, True), ("torch-eager", -2, True), ("torch-eager", -1, True),
      ("project", -1, True), ("project", 0, False), ("torch-eager", 0, False),
      ("torch-eager", 1, False), ("project", 1, False), ("project", 2, False),
      ("torch-eager", 2, False)]
  assert "after 2 warm-up round(s)" in out.splitlines()[0]
  summary = json.loads(out.split("within-round ratio\n")[1])["toy"]
  assert summary["project_over_torch-eager"] == 2.0
  assert summary["project_over_torch-eager_range"] == [2.0, 2.0]


def test_summarize_regenerates_a_saved_runs_ratios_from_its_rows(tmp_path, capsys):
  """``--summarize FILE`` times nothing: the summary comes from a ``--json`` file's rows
  (the committed record runs), warm-up rounds left out; the lower quartile is of the
  within-round ratios. A file that is not such a record is one line, exit 2."""
  rows = [dict(side="project", shape="toy", round=-1, tokens_per_s=1.0, warmup=True),
          dict(side="torch-eager", shape="toy", round=-1, tokens_per_s=1.0, warmup=True)]
  for r, (mine, peer) in enumerate([(3.0, 2.0), (2.8, 2.0), (2.6, 2.0), (2.4, 2.0), (2.2, 2.0)]):
    rows += [dict(side="project", shape="toy", round=r, tokens_per_s=mine),
             dict(side="torch-eager", shape="toy", round=r, tokens_per_s=peer)]
  saved = tmp_path / "run.json"
  saved.write_text(json.dumps(dict(rows=rows, summary={})))
  assert cli.main(["train", "--summarize", str(saved)]) == 0
  toy = json.loads(capsys.readouterr().out)["toy"]
  assert toy["project_over_torch-eager"] == 1.3
  assert toy["project_over_torch-eager_lower_quartile"] == 1.15
  assert toy["project_over_torch-eager_range"] == [1.1, 1.5]
  assert toy["project_tokens_per_s"] == 3
  for bad in ([dict(side="project")], [], rows[:2] + [rows[3]]):
    saved.write_text(json.dumps(dict(rows=bad)))
    assert cli.main(["train", "--summarize", str(saved)]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a bench train --json file" in err and len(err.splitlines()) == 1


def test_committed_record_runs_summarize_to_their_saved_summaries():
  """The record runs under hybrid_jax/bench/results regenerate their own saved ratios."""
  results = os.path.join(os.path.dirname(__file__), "..", "hybrid_jax", "bench", "results")
  for name in sorted(n for n in os.listdir(results) if n.endswith(".json")):
    with open(os.path.join(results, name)) as f:
      saved = json.load(f)
    again = train.summarize(saved["rows"])
    for shape, entry in saved["summary"].items():
      assert {k: v for k, v in again[shape].items() if k in entry} == entry


def test_readme_table_gives_the_committed_record_runs_ratios():
  """Every median and lower quartile in the docs' record-run table (docs/benchmarks.md) is
  what the committed rows regenerate (the first figures from the all-shapes run, ``rerun``
  from the other)."""
  from docs_text import docs_text
  root = os.path.join(os.path.dirname(__file__), "..")
  runs = {}
  for key, name in [("first", "all_shapes"), ("rerun", "d256_rerun")]:
    with open(os.path.join(root, "hybrid_jax", "bench", "results",
                           f"train_peer_2026-12-06_{name}.json")) as f:
      runs[key] = train.summarize(json.load(f)["rows"])
  table = [l for l in docs_text().splitlines() if re.match(r"\| (toy|d256)[\w-]* \| \d\.\d{3} \(", l)]
  assert len(table) == len(train.SHAPES)
  checked = 0
  for line in table:
    shape, *cells = [c.strip() for c in line.strip().strip("|").split("|")]
    for side, cell in zip(["torch-eager", "torch-compile"], cells):
      for part in filter(None, cell.split(";")):
        key = "rerun" if "rerun" in part else "first"
        median, quartile = (float(x) for x in re.findall(r"\d\.\d{3}", part)[:2])
        entry = runs[key][shape]
        assert (entry[f"project_over_{side}"],
                entry[f"project_over_{side}_lower_quartile"]) == (median, quartile), line
        checked += 1
  assert checked == 11


def test_plain_dots_is_a_side_whose_program_is_cached_first(monkeypatch, capsys):
  """``--plain-dots``: the step with XLA's own dot forms, timed in the same rounds; a
  one-shot worker puts its program in the cache first, as for the project (a worker that
  compiles its own step runs it slower on XLA:CPU, which would pass for the dots' effect)."""
  FakeSide.warm(monkeypatch)
  assert cli.main(["train", "--shapes", "toy", "--rounds", "2", "--plain-dots",
                   "--no-breakdown"]) == 0
  assert FakeSide.calls[:4] == [("one-shot", "toy"), ("one-shot", "toy", "--plain-dots"),
                                ("started", "project"), ("started", "project-plain-dots")]
  summary = json.loads(capsys.readouterr().out.split("within-round ratio\n")[1])["toy"]
  assert summary["project_over_project-plain-dots"] == 1.1


def test_a_worker_that_fails_before_or_between_blocks_is_one_line_naming_its_output():
  dies = [sys.executable, "-c", "import sys; print('the cause', file=sys.stderr); sys.exit(3)"]
  with pytest.raises(BenchError, match=r"^project worker \(toy\) failed: the cause "):
    train.Measured("project worker (toy)", dies)
  once = [sys.executable, "-c", "import json, sys; print(json.dumps({'ready': 1}), flush=True); "
          "sys.stdin.readline(); print('gone', file=sys.stderr); sys.exit(1)"]
  side = train.Measured("torch eager peer (toy)", once)
  with pytest.raises(BenchError) as e:
    side.block(2)
  message = str(e.value)
  assert "\n" not in message and message.startswith("torch eager peer (toy) failed: gone")
  os.remove(re.search(r"its whole output: (\S+)\)$", message).group(1))


@pytest.mark.parametrize("argv, message", [
    (["--shapes", "toy,huge"], "unknown shape(s) huge"),
    (["--compile-shapes", "nope"], "unknown shape(s) nope"),
    (["--threads", "3"], "--threads must be 0"),
    (["--rounds", "0"], "--rounds and --steps must be >= 1"),
    (["--warmup-rounds", "-1"], "--warmup-rounds >= 0"),
    (["--processes", "0"], "--processes must be 1.."),
    (["--processes", "999"], "--processes must be 1.."),
    (["--processes", "2", "--threads", "1"], "--processes must be 1.."),
])
def test_bad_arguments_are_one_line_exit_2(capsys, argv, message):
  assert cli.main(["train", *argv]) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("hybrid-jax bench train: error: ") and message in err
  assert len(err.splitlines()) == 1


def test_peer_without_torch_says_how_to_install_it(monkeypatch, capsys):
  FakeSide.warm(monkeypatch)
  monkeypatch.setattr(train, "torch_available", lambda: False)
  assert cli.main(["train", "--peer", "--rounds", "1", "--no-breakdown"]) == 0
  out = capsys.readouterr().out
  notes = [l for l in out.splitlines() if "torch is not installed" in l]
  assert len(notes) == 1 and "pip install torch" in notes[0]
  assert "torch-eager" not in out
  assert {n for n, _ in FakeSide.calls} == {"one-shot", "started", "project", "closed"}


def test_profile_splits_the_step_by_model_scope():
  cfg = train.shape_config("toy")
  step_fn, state = train.make_step(cfg, donate=False)
  from hybrid_jax.data import make_source
  batch = jax.device_put(make_source(cfg).batch(0))
  jax.block_until_ready(step_fn(state, batch))
  groups = profile.op_time_by_group(step_fn, state, batch, reps=1)
  for g in ("attention_full", "attention_swa", "mlp", "head", "loss", "optimizer", "norm"):
    assert groups.get(g, 0) > 0, (g, groups)
  named = sum(v for k, v in groups.items() if k != "other")
  assert named > 0.8 * sum(groups.values()), groups   # nearly every op carries a scope


def test_donated_step_matches_and_consumes_its_input():
  cfg = train.shape_config("toy")
  from hybrid_jax.data import make_source
  batch = jax.device_put(make_source(cfg).batch(0))
  kept_fn, state = train.make_step(cfg, donate=False)
  kept, m_kept = kept_fn(state, batch)
  donated_fn, state2 = train.make_step(cfg, donate=True)
  donated, m_donated = donated_fn(state2, batch)
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
               (kept, m_kept), (donated, m_donated))
  assert all(x.is_deleted() for x in jax.tree.leaves(state2))
  assert not any(x.is_deleted() for x in jax.tree.leaves(state))


def test_donation_aliases_the_whole_state_into_the_output():
  from hybrid_jax.bench import train
  cfg = train.shape_config("toy")
  kept, donated = train.step_memory(cfg, False), train.step_memory(cfg, True)
  assert kept["aliased"] == 0
  assert donated["aliased"] >= donated["state"] > 0
  assert kept["live"] - donated["live"] >= 0.5 * donated["state"]   # 2.2 of 2.6 MB measured


def test_a_failed_worker_is_one_line_that_names_the_file_with_its_whole_output():
  """A native crash ends in a stack trace: the error line keeps the last line and points at
  the whole output, which is kept."""
  code = "import sys; print('F0000 Check failed: the cause', file=sys.stderr); " \
         "print('    @ 0x7f PyObject_Vectorcall', file=sys.stderr); sys.exit(1)"
  with pytest.raises(BenchError) as e:
    train_workers._run([sys.executable, "-c", code], dict(os.environ), "project worker (toy)")
  message = str(e.value)
  assert "\n" not in message and message.startswith("project worker (toy) failed: @ 0x7f")
  path = re.search(r"its whole output: (\S+)\)$", message).group(1)
  assert "F0000 Check failed: the cause" in open(path).read()
  os.remove(path)


def test_the_host_breakdown_times_a_save_beside_the_per_array_baseline(tiny):
  from hybrid_jax.resolve import resolve
  host = train_measure.host_seconds(resolve(tiny()), reps=2)
  assert {"checkpoint_check", "checkpoint_save", "checkpoint_save_per_array"} <= set(host)
  assert 0 < host["checkpoint_save"] and 0 < host["checkpoint_save_per_array"]
