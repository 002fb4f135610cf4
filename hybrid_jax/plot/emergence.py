"""Emergence curves: a long-context metric against training tokens, one line per run.

``hybrid-jax plot emergence DIR... [--metric M] [--out PATH]`` reads ``eval.jsonl`` of every
run directory given (or found below a sweep directory), draws the metric (left, log tokens)
and the short-context loss (right), coloured by architecture (pattern and window), and
writes PATH.png, PATH.svg and PATH.tsv: per run, the tokens to reach ``--frac`` of its final
value (blank when the final value is 0) and to reach the absolute ``--threshold`` (default
0.5 for accuracies; blank where a run never reached it). Runs that differ only by their
seeds (``train.seed`` and ``data.seed``, which follows it unless set) are drawn as their mean
with a band spanning the seeds. For metrics where lower is better (names with "loss" or
"ppl"), "reach X of final" means value <= final / X and "reach a threshold" means
value <= threshold.
"""

import os
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from hybrid_jax.plot.axes import mean_band, readable_scale, seedless_key  # noqa: E402

from hybrid_jax.cli_args import ArgumentParser  # noqa: E402
from hybrid_jax.errors import UserError  # noqa: E402
from hybrid_jax.run import RunDir, architecture_label, atomic_write_text, read_config_json  # noqa: E402

LABELS = {
    "retrieval_acc": "exact-match accuracy (mean over tasks, lengths, depths)",
    "log_longppl": "log LongPPL (nats per key token)",
    "longppl": "LongPPL",
    "long_loss": "long-context loss (nats per token)",
    "short_loss": "held-out short-context loss (nats per token)",
    "short_ppl": "held-out short-context perplexity",
}
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P")
DEFAULT_ACC_THRESHOLD = 0.5    # accuracy metrics: the table's tokens-to-threshold column
MAX_SEARCH_DEPTH = 3


class PlotInputError(UserError, ValueError):
  """Nothing to plot as asked (no runs, no eval records, unknown metric): one line."""


def lower_is_better(metric: str) -> bool:
  return "loss" in metric or "ppl" in metric


def metric_label(metric: str) -> str:
  if metric in LABELS:
    return LABELS[metric]
  if metric.startswith("retrieval_acc_at/"):
    return f"exact-match accuracy at {metric.split('/')[1]} tokens (mean over tasks, depths)"
  if metric.startswith("retrieval_acc/"):
    return "exact-match accuracy: " + metric[len("retrieval_acc/"):].replace("/", ", ")
  return metric


def find_runs(dirs) -> list[Path]:
  """Run directories among ``dirs`` and below them (sweeps), those with eval records."""
  runs = []
  for d in map(Path, dirs):
    if not d.is_dir():
      raise PlotInputError(f"{d} is not a directory")
    if RunDir(d).config_path.exists() or RunDir(d).eval_path.exists():
      runs.append(d)
      continue
    found = sorted(p.parent for depth in range(1, MAX_SEARCH_DEPTH + 1)
                   for p in d.glob("/".join(["*"] * depth) + "/" + RunDir(d).eval_path.name))
    if not found:
      raise PlotInputError(f"{d} holds no run directory with an eval.jsonl")
    runs += found
  runs = [r for r in dict.fromkeys(runs) if RunDir(r).read_eval()]
  if not runs:
    raise PlotInputError(f"no eval records in {', '.join(map(str, dirs))}; run hybrid-jax eval first")
  return runs


def architecture(run: Path) -> str:
  """The run's architecture label ("SF w=32", "MF", "F"); "?" without a readable config."""
  cfg = read_config_json(run)
  return architecture_label(cfg["model"]) if cfg and "model" in cfg else "?"


def seed_groups(runs, curves) -> list[list[tuple[Path, list]]]:
  """Runs that differ only by seed, together (drawn as their mean with a band); others alone."""
  groups = {}
  for run, curve in zip(runs, curves):
    groups.setdefault(seedless_key(run), []).append((run, curve))
  return list(groups.values())


def default_threshold(metric: str):
  return DEFAULT_ACC_THRESHOLD if "_acc" in metric else None


def run_curve(run: Path, settings_id: str | None = None) -> list[dict]:
  """The run's records under one settings id (default: that of its last record), by step."""
  records = RunDir(run).read_eval()
  sid = settings_id or records[-1].get("settings_id")
  return sorted((r for r in records if r.get("settings_id") == sid), key=lambda r: r["step"])


def tokens_to_reach(curve: list[dict], metric: str, *, frac: float, threshold: float | None):
  """(tokens to reach frac of the final value, tokens to reach threshold); None if never."""
  points = [(r["tokens"], r[metric]) for r in curve if r.get(metric) is not None]
  if not points:
    return None, None, None
  final = points[-1][1]
  lower = lower_is_better(metric)
  reached = lambda v, target: v <= target if lower else v >= target
  first = lambda target: next((t for t, v in points if reached(v, target)), None)
  to_frac = first(final / frac if lower else final * frac) if final > 0 else None  # 0: no signal
  to_abs = first(threshold) if threshold is not None else None
  return final, to_frac, to_abs


def _fmt(x):
  if x is None:
    return ""                          # blank: never reached (or no value)
  return f"{x:.4g}" if isinstance(x, float) else str(x)


def table(runs, curves, metric, frac, threshold) -> str:
  head = ["run", "architecture", "final_tokens", f"final_{metric}", f"tokens_to_{frac:g}_of_final"]
  if threshold is not None:
    head.append(f"tokens_to_{'le' if lower_is_better(metric) else 'ge'}_{threshold:g}")
  lines = ["\t".join(head)]
  for run, curve in zip(runs, curves):
    final, to_frac, to_abs = tokens_to_reach(curve, metric, frac=frac, threshold=threshold)
    row = [run.name, architecture(run), _fmt(curve[-1]["tokens"] if curve else None),
           _fmt(final), _fmt(to_frac)] + ([_fmt(to_abs)] if threshold is not None else [])
    lines.append("\t".join(row))
  return "\n".join(lines) + "\n"


def _save(fig, path: Path):
  tmp = path.with_name(f".{path.stem}.tmp{os.getpid()}{path.suffix}")
  fig.savefig(tmp, dpi=120, bbox_inches="tight")
  os.replace(tmp, path)


def plot_emergence(dirs, *, metric="retrieval_acc", short_metric="short_loss", out=None,
                   frac=0.9, threshold=None, settings_id=None) -> dict:
  """Write ``out``.png/.svg/.tsv (default: emergence.* in the first DIR); return their paths
  and the table text. Every input error is raised before anything is written."""
  threshold = default_threshold(metric) if threshold is None else threshold
  runs = sorted(find_runs(dirs), key=lambda r: (architecture(r), r.name))
  curves = [run_curve(r, settings_id) for r in runs]
  if not any(r.get(metric) is not None for c in curves for r in c):
    known = sorted({k for c in curves for r in c for k, v in r.items()
                    if isinstance(v, (int, float)) and k not in ("step", "tokens")})
    raise PlotInputError(f"no run has metric {metric!r} (known: {', '.join(known[:12])}"
                         f"{', ...' if len(known) > 12 else ''})")
  out = Path(out) if out else Path(dirs[0]) / "emergence"
  if out.suffix in (".png", ".svg", ".tsv"):
    out = out.with_suffix("")
  if not out.parent.is_dir():
    raise PlotInputError(f"output directory {out.parent} does not exist")

  groups = list(dict.fromkeys(architecture(r) for r in runs))
  colours = {g: plt.get_cmap("tab10")(i % 10) for i, g in enumerate(groups)}
  seen = {g: 0 for g in groups}
  fig, (ax_m, ax_s) = plt.subplots(1, 2, figsize=(12, 4.4))
  for members in seed_groups(runs, curves):
    arch = architecture(members[0][0])
    k = seen[arch]                     # runs of one architecture: told apart by dash and marker
    seen[arch] += 1
    style = dict(color=colours[arch], linestyle=LINESTYLES[k % len(LINESTYLES)],
                 marker=MARKERS[k % len(MARKERS)], markersize=4)
    for ax, key in ((ax_m, metric), (ax_s, short_metric)):
      pts = [[(r["tokens"], r[key]) for r in curve if r.get(key) is not None and r["tokens"] > 0]
             for _, curve in members]
      if len(members) == 1 and pts[0]:
        ax.plot(*zip(*pts[0]), label=f"{members[0][0].name} ({arch})", **style)
      elif len(members) > 1 and all(pts):
        x, mean, low, high = mean_band(pts)
        ax.plot(x, mean, label=f"{arch}: mean of {len(members)} seeds (band: their range)", **style)
        ax.fill_between(x, low, high, color=colours[arch], alpha=0.2, linewidth=0)
  ax_m.set(ylabel=metric_label(metric), title="long-context: " + metric)
  ax_s.set(ylabel=metric_label(short_metric),
           title="short-context: " + short_metric)
  if "_acc" in metric:
    ax_m.set_ylim(-0.02, 1.02)
  if threshold is not None:
    ax_m.axhline(threshold, color="grey", linewidth=0.8, linestyle=":", label=f"threshold {threshold:g}")
  tokens = [r["tokens"] for c in curves for r in c]
  for ax in (ax_m, ax_s):
    readable_scale(ax, "x", tokens)
    ax.set_xlabel(f"training tokens{' (log scale)' if ax.get_xscale() == 'log' else ''}")
    ax.grid(alpha=0.3)
  handles, labels = ax_m.get_legend_handles_labels()
  fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
             ncol=min(4, max(1, len(labels))), frameon=False, fontsize="small")
  fig.tight_layout()
  text = table(runs, curves, metric, frac, threshold)
  paths = dict(png=out.with_suffix(".png"), svg=out.with_suffix(".svg"), tsv=out.with_suffix(".tsv"))
  _save(fig, paths["png"])
  _save(fig, paths["svg"])
  plt.close(fig)
  atomic_write_text(paths["tsv"], text)
  return dict(paths, table=text)


def main(argv=None):
  p = ArgumentParser(prog="hybrid-jax plot emergence", description=__doc__.split("\n\n")[0])
  p.add_argument("dirs", nargs="+", metavar="DIR", help="run directories or sweep directories")
  p.add_argument("--metric", default="retrieval_acc",
                 help="eval.jsonl key for the left panel (e.g. log_longppl, retrieval_acc/mqar)")
  p.add_argument("--short-metric", default="short_loss", help="eval.jsonl key for the right panel")
  p.add_argument("--out", default=None, help="output path without suffix (default: DIR/emergence)")
  p.add_argument("--frac", type=float, default=0.9, help="table: tokens to reach this share of final")
  p.add_argument("--threshold", type=float, default=None,
                 help="Table: tokens to reach this value, blank where never reached (default: "
                      f"{DEFAULT_ACC_THRESHOLD} for accuracies; none for other metrics).")
  p.add_argument("--settings-id", default=None, help="eval settings id (default: each run's latest)")
  args = p.parse_args(argv)
  if not 0 < args.frac <= 1:
    raise PlotInputError(f"--frac must be in (0, 1] (got {args.frac})")
  result = plot_emergence(args.dirs, metric=args.metric, short_metric=args.short_metric,
                          out=args.out, frac=args.frac, threshold=args.threshold,
                          settings_id=args.settings_id)
  sys.stdout.write(result["table"])
  print(f"hybrid-jax plot emergence: wrote {result['png']}, {result['svg']}, {result['tsv']}")
  return 0
