"""``hybrid-jax plot scaling``: each run's final record against its tokens, one line per
(architecture, size), from fabricated sweep directories (the plot reads files only)."""

import json
import subprocess
import sys

import pytest

from hybrid_jax.plot.scaling import final_points, plot_scaling


def _fake_run(path, pattern, window, n, budget, loss):
  path.mkdir(parents=True)
  config = dict(model=dict(pattern=pattern, window=window, size="toy", pos_full="rope"),
                train=dict(seed=0), derived=dict(non_embedding_params=n))
  (path / "config.json").write_text(json.dumps(config))
  with open(path / "eval.jsonl", "w") as f:
    for frac in (0.5, 1.0):      # an early checkpoint, then the final one
      f.write(json.dumps(dict(step=int(10 * frac), tokens=int(budget * n * frac),
                              short_loss=loss + (1 - frac), retrieval_acc=frac)) + "\n")


@pytest.fixture
def sweep(tmp_path):
  root = tmp_path / "sweep"
  for pattern, window in (("F", 32), ("SF", 8)):
    for n in (1000, 4000):
      for budget in (1, 2, 4):
        _fake_run(root / f"{pattern}-{n}-{budget}", pattern, window, n, budget, 5.0 / budget + n / 1e4)
  return root


def test_final_points_group_by_architecture_and_size(sweep):
  lines = final_points(sweep, ("short_loss",))
  assert set(lines) == {("F", 1000), ("F", 4000), ("SF w=8", 1000), ("SF w=8", 4000)}
  pts = lines[("SF w=8", 4000)]
  assert [t for t, _ in pts] == [4000, 8000, 16000]                     # final checkpoints only
  assert [v["short_loss"] for _, v in pts] == pytest.approx([5.4, 2.9, 1.65])


def test_plot_scaling_writes_png_and_svg(sweep, tmp_path):
  out = plot_scaling(sweep, ("short_loss", "retrieval_acc"), tmp_path / "fig")
  assert out["png"].read_bytes()[:4] == b"\x89PNG" and out["png"].stat().st_size > 10_000
  assert b"training tokens" in out["svg"].read_bytes()


@pytest.mark.parametrize("args,message", [
    (["--metric", "nope"], "no run has metric 'nope'"),
    (["--out", "x"], None),
])
def test_cli_errors_in_one_line(sweep, tmp_path, args, message):
  r = subprocess.run([sys.executable, "-m", "hybrid_jax.cli", "plot", "scaling", str(sweep),
                      *(a if a != "x" else str(tmp_path / "x") for a in args)],
                     capture_output=True, text=True)
  if message is None:
    assert r.returncode == 0 and (tmp_path / "x.png").exists(), r.stderr
  else:
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and message in r.stderr
    assert not list(sweep.glob("scaling.*"))
  empty = tmp_path / "empty"
  empty.mkdir()
  r = subprocess.run([sys.executable, "-m", "hybrid_jax.cli", "plot", "scaling", str(empty)],
                     capture_output=True, text=True)
  assert r.returncode == 2 and "no run" in r.stderr
