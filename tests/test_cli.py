"""``hybrid-jax`` dispatch: ``bench`` and its subcommands and ``data`` reach their modules with
their own flags, and ``bench eval`` times one evaluation end to end."""

import sys
import types

import pytest

from hybrid_jax import cli


def _fake_module(monkeypatch, name, calls):
  module = types.ModuleType(name)
  module.main = lambda argv: calls.append((name, list(argv)))
  monkeypatch.setitem(sys.modules, name, module)


@pytest.mark.parametrize("argv, expected", [
    (["bench", "--rounds", "1"], ("hybrid_jax.bench.train", ["--rounds", "1"])),
    (["bench", "train", "--peer"], ("hybrid_jax.bench.train", ["--peer"])),
    (["bench", "data", "--rows", "4"], ("hybrid_jax.bench.data", ["--rows", "4"])),
    (["bench", "eval", "--reps", "1"], ("hybrid_jax.bench.eval", ["--reps", "1"])),
    (["bench", "mesh"], ("hybrid_jax.bench.mesh", [])),
    (["bench", "kernels", "--ops", "swa"], ("hybrid_jax.bench.kernels", ["--ops", "swa"])),
    (["bench", "mixers", "--reps", "1"], ("hybrid_jax.bench.mixers", ["--reps", "1"])),
    (["data", "build", "--x"], ("hybrid_jax.commands.data", ["build", "--x"])),
])
def test_commands_reach_their_modules(monkeypatch, argv, expected):
  calls = []
  for name in ("hybrid_jax.bench.train", "hybrid_jax.bench.data", "hybrid_jax.bench.eval",
               "hybrid_jax.bench.mesh", "hybrid_jax.bench.mixers", "hybrid_jax.bench.kernels",
               "hybrid_jax.commands.data"):
    _fake_module(monkeypatch, name, calls)
  import hybrid_jax.commands
  monkeypatch.setattr(hybrid_jax.commands, "data", sys.modules["hybrid_jax.commands.data"], raising=False)
  assert cli.main(argv) == 0
  assert calls == [expected]


def test_bench_eval_times_one_checkpoint_of_the_toy_default(capsys):
  from hybrid_jax.bench import eval as bench
  summary = bench.main(["--tasks", "mqar", "--lengths", "96", "--depths", "0.5", "--examples", "2",
                        "--short-rows", "2", "--longppl-length", "96", "--longppl-window", "32",
                        "--longppl-rows", "1", "--reps", "1"])
  assert summary["model"] == "toy-xs SF w=32"
  assert summary["tokens_per_checkpoint"] == 2 * 256 + 2 * 96 + (96 + 5 * 32)
  assert summary["first_eval_s"] > summary["eval_s_per_checkpoint"] > 0
  assert "s per checkpoint" in capsys.readouterr().out
