"""Scaling curves of a sweep: each run's final metrics against its training tokens, one line
per (architecture, model size) through the runs of different token budgets.

``hybrid-jax plot scaling DIR [--metric short_loss --metric log_longppl] [--out PATH]``
reads the sweep's collected rows (the same as ``sweep collect``) and writes PATH.png and
PATH.svg, one panel per metric; this is the paper's picture of how the mixers compare as
N and D grow (short-context curves nearly coincide; long-context ones converge late).
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from hybrid_jax.run import collect_rows  # noqa: E402
from hybrid_jax.cli_args import ArgumentParser  # noqa: E402
from hybrid_jax.plot.axes import readable_scale  # noqa: E402
from hybrid_jax.plot.emergence import PlotInputError, metric_label  # noqa: E402


def _arch(row) -> str:
  windowed = "S" in row["pattern"] or "H" in row["pattern"]
  return f"{row['pattern']} w={row['window']}" if windowed else row["pattern"]


def final_points(root, metrics) -> dict:
  """{(architecture, n): [(tokens, {metric: value}), ...]} from each run's last record."""
  last = {}
  for row in collect_rows(root):
    if row["run"] not in last or row["step"] >= last[row["run"]]["step"]:
      last[row["run"]] = row
  if not last:
    raise PlotInputError(f"no run under {root} has a config.json and records yet")
  lines = {}
  for row in last.values():
    values = {m: row.get(m) for m in metrics}
    lines.setdefault((_arch(row), row["n"]), []).append((row["tokens"], values))
  missing = [m for m in metrics if all(v[m] is None for pts in lines.values() for _, v in pts)]
  if missing:
    raise PlotInputError(f"no run has metric {missing[0]!r} (run hybrid-jax eval first?)")
  return {k: sorted(v, key=lambda p: p[0]) for k, v in sorted(lines.items())}


def plot_scaling(root, metrics=("short_loss",), out=None) -> dict:
  lines = final_points(root, metrics)
  out = Path(out) if out else Path(root) / "scaling"
  archs = sorted({a for a, _ in lines})
  sizes = sorted({n for _, n in lines})
  colors = dict(zip(archs, plt.cm.tab10.colors * 3))
  markers = dict(zip(sizes, "os^Dv<>ph*"))
  fig, axes = plt.subplots(1, len(metrics), figsize=(5.6 * len(metrics), 4.2), squeeze=False)
  for ax, metric in zip(axes[0], metrics):
    for (arch, n), pts in lines.items():
      by_tokens = {}                   # runs at one (architecture, N, D) differ only by seed
      for t, v in pts:
        if v[metric] is not None:
          by_tokens.setdefault(t, []).append(v[metric])
      xs = sorted(by_tokens)
      ys = [float(np.mean(by_tokens[t])) for t in xs]
      seeds = max((len(v) for v in by_tokens.values()), default=1)
      ax.plot(xs, ys, color=colors[arch], marker=markers[n], ms=4, lw=1.2,
              label=f"{arch}, N={n / 1e6:.3g}M" + (f" (mean of {seeds} seeds, band: range)" if seeds > 1 else ""))
      if seeds > 1:
        ax.fill_between(xs, [min(by_tokens[t]) for t in xs], [max(by_tokens[t]) for t in xs],
                        color=colors[arch], alpha=0.2, linewidth=0)
    readable_scale(ax, "x", [t for pts in lines.values() for t, _ in pts])
    ax.set(xlabel="training tokens D (final checkpoint of each run)", ylabel=metric)
    ax.set_title(metric_label(metric), fontsize=9)
    ax.grid(alpha=0.3)
  handles, labels = axes[0][0].get_legend_handles_labels()
  fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8,
             frameon=False)
  fig.tight_layout(rect=(0, 0.06 + 0.04 * ((len(labels) - 1) // 4), 1, 1))
  out.parent.mkdir(parents=True, exist_ok=True)
  written = {}
  for suffix in ("png", "svg"):
    path = out.with_suffix(f".{suffix}")
    tmp = path.with_name(f".{path.name}.tmp.{suffix}")
    fig.savefig(tmp, dpi=120)
    tmp.replace(path)
    written[suffix] = path
  plt.close(fig)
  return written


def main(argv=None):
  p = ArgumentParser(prog="hybrid-jax plot scaling", description=__doc__.split("\n\n")[0])
  p.add_argument("root", help="a sweep directory")
  p.add_argument("--metric", action="append", default=None,
                 help="eval.jsonl or collected column per panel, repeatable (default: short_loss)")
  p.add_argument("--out", default=None, help="output path without suffix (default: ROOT/scaling)")
  args = p.parse_args(argv)
  if not Path(args.root).is_dir():
    raise PlotInputError(f"{args.root} is not a directory")
  written = plot_scaling(args.root, tuple(args.metric or ["short_loss"]), args.out)
  print(f"hybrid-jax plot scaling: wrote {written['png']}, {written['svg']}")
  return 0
