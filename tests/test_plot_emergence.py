"""``hybrid-jax plot emergence``: figures and the tokens-to-reach table from eval.jsonl
run directories (fabricated here: the plot reads files only), and one-line bad input."""

import json
from pathlib import Path

import pytest

from hybrid_jax import cli
from hybrid_jax.plot.emergence import plot_emergence, tokens_to_reach

STEPS = (1, 2, 4, 8, 16)
ACC = {"F": (0.0, 0.1, 0.5, 0.95, 1.0), "SF": (0.0, 0.0, 0.1, 0.3, 0.6)}
LOSS = (6.0, 5.0, 4.0, 3.5, 3.0)


def _fake_run(path, pattern, window=32, acc=None, loss=LOSS, settings_id="s1"):
  path.mkdir(parents=True)
  (path / "config.json").write_text(json.dumps(dict(model=dict(pattern=pattern, window=window))))
  with open(path / "eval.jsonl", "w") as f:
    for step, a, l in zip(STEPS, acc or ACC[pattern], loss):
      f.write(json.dumps(dict(step=step, tokens=step * 1000, settings_id=settings_id,
                              retrieval_acc=a, short_loss=l, log_longppl=l - 1)) + "\n")
  return path


@pytest.fixture
def sweep(tmp_path):
  root = tmp_path / "sweep"
  _fake_run(root / "full", "F")
  _fake_run(root / "swa-w32", "SF", 32)
  _fake_run(root / "nested" / "swa-w128", "SF", 128, acc=(0.0, 0.0, 0.0, 0.1, 0.2))
  return root


def test_plot_writes_png_svg_and_table(sweep, tmp_path):
  out = plot_emergence([sweep], out=tmp_path / "fig", threshold=0.5)
  png, svg, tsv = out["png"], out["svg"], out["tsv"]
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
  assert b"<svg" in svg.read_bytes()[:1000] and b"training tokens" in svg.read_bytes()
  rows = {line.split("\t")[0]: line.split("\t") for line in tsv.read_text().splitlines()[1:]}
  assert set(rows) == {"full", "swa-w32", "swa-w128"}
  assert rows["full"][1:] == ["F", "16000", "1", "8000", "4000"]        # 0.9 of 1.0 at step 8
  assert rows["swa-w32"][1:] == ["SF w=32", "16000", "0.6", "16000", "16000"]
  assert rows["swa-w128"][5] == ""                                      # never reaches 0.5: blank
  assert not list(tmp_path.glob(".*tmp*"))                              # temp files renamed


def test_lower_is_better_metrics_reach_from_above():
  curve = [dict(tokens=t, short_loss=l) for t, l in zip((1, 2, 4, 8), (6.0, 3.5, 3.2, 3.0))]
  final, to_frac, to_abs = tokens_to_reach(curve, "short_loss", frac=0.9, threshold=3.25)
  assert (final, to_frac, to_abs) == (3.0, 4, 4)       # 3.2 <= 3.0 / 0.9 = 3.33; 3.2 <= 3.25


def test_each_run_uses_its_latest_settings(tmp_path):
  run = _fake_run(tmp_path / "r", "F", settings_id="old")
  with open(run / "eval.jsonl", "a") as f:
    f.write(json.dumps(dict(step=16, tokens=16000, settings_id="new", retrieval_acc=0.25,
                            short_loss=3.0)) + "\n")
  out = plot_emergence([run], out=tmp_path / "fig")
  assert out["table"].splitlines()[1].split("\t")[3] == "0.25"
  out = plot_emergence([run], out=tmp_path / "fig", settings_id="old")
  assert out["table"].splitlines()[1].split("\t")[3] == "1"


def _cli(argv, capsys):
  try:
    code = cli.main(argv)
  except SystemExit as e:
    code = e.code
  return code, capsys.readouterr()


def test_cli_prints_the_table_and_writes_next_to_the_first_dir(sweep, capsys):
  code, out = _cli(["plot", "emergence", str(sweep), "--metric", "log_longppl"], capsys)
  assert code == 0 and "final_log_longppl" in out.out
  assert all((sweep / f"emergence.{ext}").stat().st_size > 0 for ext in ("png", "svg", "tsv"))


@pytest.mark.parametrize("argv, message", [
    (["plot", "emergence", "{empty}"], "holds no run directory with an eval.jsonl"),
    (["plot", "emergence", "{sweep}", "--metric", "nope"], "no run has metric 'nope' (known: log_longppl"),
    (["plot", "emergence", "{missing}"], "is not a directory"),
    (["plot", "emergence", "{sweep}", "--out", "{missing}/fig"], "output directory"),
    (["plot", "scatter", "{sweep}"], "plot needs a kind: emergence"),
])
def test_bad_plot_input_is_one_line_and_writes_nothing(sweep, tmp_path, capsys, argv, message):
  (tmp_path / "empty").mkdir()
  names = dict(sweep=sweep, empty=tmp_path / "empty", missing=tmp_path / "missing")
  before = sorted(tmp_path.rglob("*"))
  code, out = _cli([a.format(**names) for a in argv], capsys)
  err = out.err.strip().splitlines()
  assert code == 2 and len(err) == 1 and message in err[0], err
  assert sorted(tmp_path.rglob("*")) == before


def test_the_table_states_a_default_threshold_and_leaves_unreached_cells_blank(tmp_path):
  run = _fake_run(tmp_path / "flat", "SF", acc=(0.0,) * 5)
  head, row = plot_emergence([run], out=tmp_path / "fig")["table"].splitlines()
  assert head.split("\t")[4:] == ["tokens_to_0.9_of_final", "tokens_to_ge_0.5"]
  assert row.split("\t")[3:] == ["0", "", ""]          # a final value of 0: no share of it


def test_runs_differing_only_by_seed_are_drawn_as_a_mean_with_a_band(tmp_path, monkeypatch):
  import matplotlib.axes
  a = _fake_run(tmp_path / "s0", "F", acc=(0.0, 0.2, 0.4, 0.6, 0.8))
  b = _fake_run(tmp_path / "s1", "F", acc=(0.0, 0.4, 0.6, 0.8, 1.0))
  for run, seed in ((a, 0), (b, 1)):
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps(dict(cfg, train=dict(seed=seed, lr=1e-3))))
  bands, lines = [], []
  fill, plot = matplotlib.axes.Axes.fill_between, matplotlib.axes.Axes.plot
  monkeypatch.setattr(matplotlib.axes.Axes, "fill_between",
                      lambda self, x, lo, hi, **k: bands.append((list(lo), list(hi))) or fill(self, x, lo, hi, **k))
  monkeypatch.setattr(matplotlib.axes.Axes, "plot",
                      lambda self, *args, **k: lines.append((list(args[1]), k.get("label"))) or plot(self, *args, **k))
  plot_emergence([a, b], out=tmp_path / "fig")
  acc_line = [(y, label) for y, label in lines if y[-1] == pytest.approx(0.9)]
  assert acc_line and "mean of 2 seeds" in acc_line[0][1]
  assert ([0.2, 0.4, 0.6, 0.8], [0.4, 0.6, 0.8, 1.0]) in [(lo[-4:], hi[-4:]) for lo, hi in bands]


def test_the_shipped_seed_sweep_is_drawn_as_one_mean_per_architecture(tmp_path, monkeypatch):
  """sweeps/toy_windows.py: 4 architectures x 2 seeds. Each run's config.json is its resolved
  config, where the unset data.seed has become train.seed: a key that dropped train.seed alone
  kept all 8 runs apart."""
  import matplotlib.axes
  from hybrid_jax.launch.grid import load_sweep, plan
  runs = plan(load_sweep(Path(__file__).parents[1] / "sweeps" / "toy_windows.py"))
  assert len(runs) == 8 and {r.resolved.data.seed for r in runs} == {0, 1}
  for i, r in enumerate(runs):
    path = _fake_run(tmp_path / "root" / r.name, "F", acc=(0.0, 0.1, 0.2, 0.3, 0.1 * i))
    (path / "config.json").write_text(json.dumps(json.loads(r.resolved.to_json())))
  labels = []
  plot = matplotlib.axes.Axes.plot
  monkeypatch.setattr(matplotlib.axes.Axes, "plot",
                      lambda self, *a, **k: labels.append(k.get("label")) or plot(self, *a, **k))
  plot_emergence([tmp_path / "root"], out=tmp_path / "fig")
  acc_labels = labels[::2]                       # each group: accuracy panel, then loss panel
  assert sorted(acc_labels) == ["F: mean of 2 seeds (band: their range)",
                                "SF w=128: mean of 2 seeds (band: their range)",
                                "SF w=32: mean of 2 seeds (band: their range)",
                                "SF w=8: mean of 2 seeds (band: their range)"]


def test_loss_axes_have_tick_labels_at_any_range(tmp_path):
  import matplotlib.pyplot as plt
  from hybrid_jax.plot.axes import readable_scale
  for values in ([2.9, 3.0, 3.3], [0.5, 8.0, 60.0], [1e-3, 1e-3]):
    fig, ax = plt.subplots()
    ax.plot(range(len(values)), values)
    readable_scale(ax, "y", values)
    fig.canvas.draw()
    lo, hi = ax.get_ylim()
    labels = [t.get_text() for t in ax.get_yticklabels() if lo <= t.get_position()[1] <= hi]
    assert sum(bool(text) for text in labels) >= 2, (values, labels)
    plt.close(fig)


def test_training_curves_label_two_or_more_token_ticks_within_one_power_of_ten(tmp_path,
                                                                             monkeypatch):
  import matplotlib.figure

  from hybrid_jax.plot.curves import write_training_curves
  from hybrid_jax.run import RunDir
  run = RunDir(tmp_path / "run")
  run.path.mkdir()
  for step in range(10, 301, 10):          # the toy default: 2048 tokens a step, logged every 10
    run.append_metrics(dict(step=step, tokens=2048 * step, loss=3.0 - step / 200,
                            answer_loss=4.0 - step / 100, answer_acc=step / 300))
  saved = []
  savefig = matplotlib.figure.Figure.savefig
  monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                      lambda self, *a, **k: saved.append(self) or savefig(self, *a, **k))
  assert write_training_curves(run) == run.path / "curves.png"
  for ax in saved[0].axes:                 # drawn by savefig: the labels are the saved ones
    lo, hi = ax.get_xlim()
    labels = [t.get_text() for t in ax.get_xticklabels() if lo <= t.get_position()[0] <= hi]
    assert ax.get_xscale() == "log" and sum(bool(text) for text in labels) >= 2, labels


def test_plot_warns_once_about_each_bad_eval_line(sweep, tmp_path, capsys):
  with open(sweep / "full" / "eval.jsonl", "a") as f:
    f.write("#### garbage ####\n")
  code, out = _cli(["plot", "emergence", str(sweep), "--out", str(tmp_path / "fig")], capsys)
  err = [l for l in out.err.splitlines() if "record skipped" in l]
  assert code == 0
  assert err == [f"hybrid-jax: warning: {sweep / 'full' / 'eval.jsonl'}:6: record skipped "
                 "(not a JSON line)"]
