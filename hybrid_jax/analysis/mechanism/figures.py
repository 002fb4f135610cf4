"""Figures of the mechanism analyses (matplotlib, Agg): each returns a Figure the caller
writes as PNG + SVG with ``runs.write_figure``."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from hybrid_jax.analysis.mechanism.forward import layer_kind  # noqa: E402

KIND_MARK = {"full": "F", "swa": "S", "headwise": "H", "recurrent": "R"}


def _layer_labels(letters: str) -> list[str]:
  return [f"{i} {letter} ({layer_kind(letter)})" for i, letter in enumerate(letters)]


def head_heatmap(matrix_LxH, letters: str, top, title: str):
  """Layer x head heatmap; recurrent layers (no heads) are masked grey; top heads boxed."""
  m = np.ma.masked_invalid(np.asarray(matrix_LxH, float))
  fig, ax = plt.subplots(figsize=(1.2 + 0.5 * m.shape[1], 1.0 + 0.4 * m.shape[0]))
  cmap = plt.get_cmap("viridis").with_extremes(bad="lightgrey")
  im = ax.imshow(m, cmap=cmap, aspect="auto", vmin=0, vmax=max(1e-9, float(np.nanmax(matrix_LxH))
                                                                  if np.isfinite(matrix_LxH).any() else 1))
  for layer, h in top:
    ax.add_patch(plt.Rectangle((h - 0.5, layer - 0.5), 1, 1, fill=False, ec="red", lw=2))
  ax.set_yticks(range(len(letters)), _layer_labels(letters))
  ax.set_xticks(range(m.shape[1]))
  ax.set_xlabel("head")
  ax.set_title(title, fontsize=9)
  fig.colorbar(im, ax=ax)
  return fig


def trace_figure(traces: list[dict], labels: list[str]):
  keys = (("mass", "retrieval score (mass on needle)"), ("norm_entropy", "normalised entropy"),
          ("q_rel_l2", "relative L2 of W_q to reference"), ("k_rel_l2", "relative L2 of W_k to reference"))
  fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.2))
  for tr, label in zip(traces, labels):
    tokens = [p["tokens"] for p in tr["points"]]
    for ax, (key, _) in zip(axes, keys):
      ax.plot(tokens, [np.mean([h[key] for h in p["heads"]]) for p in tr["points"]], marker="o",
              label=label)
  for ax, (_, name) in zip(axes, keys):
    ax.set_xlabel("training tokens")
    ax.set_title(name + " (mean of top-k heads)", fontsize=8)
    if all(p["tokens"] > 0 for tr in traces for p in tr["points"]):
      ax.set_xscale("log")
      ax.xaxis.set_minor_formatter(NullFormatter())
  axes[0].legend(fontsize=7)
  return fig


def bars(groups: dict, metrics: list[str], title: str):
  """One panel per metric, one bar per group (e.g. none / constrained settings)."""
  fig, axes = plt.subplots(1, len(metrics), figsize=(3.5 * len(metrics), 3))
  axes = np.atleast_1d(axes)
  for ax, metric in zip(axes, metrics):
    names = list(groups)
    ax.bar(range(len(names)), [groups[n].get(metric, np.nan) for n in names], color="C0")
    ax.set_xticks(range(len(names)), [n.replace("_", "\n") for n in names], fontsize=7)
    ax.set_title(metric, fontsize=9)
  fig.suptitle(title, fontsize=9)
  return fig


def probe_figure(accuracy, chance: float, letters: str, title: str):
  fig, ax = plt.subplots(figsize=(max(4, 0.5 * len(letters) + 2), 3))
  x = np.arange(len(accuracy))
  ax.plot(x, accuracy, color="black", lw=1)
  for kind, mark in KIND_MARK.items():
    sel = [i for i, letter in enumerate(letters) if layer_kind(letter) == kind]
    if sel:
      ax.scatter(sel, [accuracy[i] for i in sel], label=f"{mark}: {kind}", zorder=3)
  ax.axhline(chance, ls=":", color="grey", label="chance")
  ax.set_xticks(x, [f"{i}{letter}" for i, letter in enumerate(letters)], fontsize=7)
  ax.set_xlabel("layer")
  ax.set_ylabel("probe accuracy")
  ax.set_ylim(0, 1.05)
  ax.set_title(title, fontsize=9)
  ax.legend(fontsize=7)
  return fig


def gradient_figure(result: dict, title: str):
  fig, ax = plt.subplots(figsize=(4.5, 3.2))
  d = np.arange(len(result["per_distance"]))
  y = np.asarray(result["per_distance"])
  ax.plot(d + 1, np.where(y > 0, y, np.nan), lw=0.8, alpha=0.5, label="per distance")
  edges = np.asarray(result["bin_edges"])
  ax.plot(edges[:-1] + 1, [v if v > 0 else np.nan for v in result["binned"]], marker="o",
          label="log bins")
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlabel("distance from the targets + 1 (tokens)")
  ax.set_ylabel("|d target logits / d embedding|")
  ax.set_title(title, fontsize=9)
  ax.legend(fontsize=7)
  return fig
