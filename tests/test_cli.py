"""``hybrid-jax`` dispatch: ``bench`` keeps its own flags, ``bench data``/``bench eval`` and
``data`` reach their modules, and ``bench eval`` times one evaluation end to end."""

import sys
import types

import pytest

from hybrid_jax import cli


def _fake_module(monkeypatch, name, calls):
  module = types.ModuleType(name)
  module.main = lambda argv: calls.append((name, list(argv)))
  monkeypatch.setitem(sys.modules, name, module)


@pytest.mark.parametrize("argv, expected", [
    (["bench", "--skip", "training"], ("hybrid_jax.bench", ["--skip", "training"])),
    (["bench", "data", "--rows", "4"], ("hybrid_jax.data.bench", ["--rows", "4"])),
    (["bench", "eval", "--reps", "1"], ("hybrid_jax.eval.bench", ["--reps", "1"])),
    (["data", "build", "--x"], ("hybrid_jax.data.cli", ["build", "--x"])),
])
def test_commands_reach_their_modules(monkeypatch, argv, expected):
  calls = []
  for name in ("hybrid_jax.bench", "hybrid_jax.data.bench", "hybrid_jax.eval.bench",
               "hybrid_jax.data.cli"):
    _fake_module(monkeypatch, name, calls)
  import hybrid_jax
  import hybrid_jax.data
  monkeypatch.setattr(hybrid_jax, "bench", sys.modules["hybrid_jax.bench"], raising=False)
  monkeypatch.setattr(hybrid_jax.data, "cli", sys.modules["hybrid_jax.data.cli"], raising=False)
  assert cli.main(argv) == 0
  assert calls == [expected]


def test_bench_eval_times_one_checkpoint_of_the_toy_default(capsys):
  from hybrid_jax.eval import bench
  summary = bench.main(["--tasks", "mqar", "--lengths", "96", "--depths", "0.5", "--examples", "2",
                        "--short-rows", "2", "--longppl-length", "96", "--longppl-window", "32",
                        "--longppl-rows", "1", "--reps", "1"])
  assert summary["model"] == "toy-xs SF w=32"
  assert summary["tokens_per_checkpoint"] == 2 * 256 + 2 * 96 + (96 + 5 * 32)
  assert summary["first_eval_s"] > summary["eval_s_per_checkpoint"] > 0
  assert "s per checkpoint" in capsys.readouterr().out
