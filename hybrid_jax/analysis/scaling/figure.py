"""The figure of a fit: each model size's points over tokens D with its fitted curve."""

import os
from pathlib import Path

import numpy as np

from hybrid_jax.analysis.scaling.fitting import Fit
from hybrid_jax.analysis.scaling.table import Points


def plot(fit_: Fit, points: Points, out: Path, held_out_n=None):
  import matplotlib   # lazy: matplotlib costs ~0.7 s at import; only figure writers need it
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt   # lazy: matplotlib costs ~0.7 s at import; only figure writers need it
  fig, ax = plt.subplots(figsize=(6.4, 4.4))
  sizes = sorted(set(points.n))
  colors = plt.cm.viridis(np.linspace(0, 0.9, len(sizes)))
  for n, color in zip(sizes, colors):
    m = points.n == n
    held = held_out_n is not None and n == held_out_n
    ax.scatter(points.d[m], points.y[m], color=color, s=18, marker="x" if held else "o",
               label=f"N = {n / 1e6:.3g}M" + (" (held out)" if held else ""))
    d = np.geomspace(points.d[m].min(), points.d[m].max(), 100)
    ax.plot(d, fit_.predict(n, d), color=color, lw=1.2, ls="--" if held else "-")
  ax.set(xscale="log", xlabel="training tokens D", ylabel=points.label,
         title=f"fit: {fit_}".replace("L(N, D) = ", ""))
  ax.title.set_fontsize(8)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  out.parent.mkdir(parents=True, exist_ok=True)
  tmp = out.with_name(f".{out.name}.tmp{os.getpid()}{out.suffix}")
  fig.savefig(tmp, dpi=120)
  plt.close(fig)
  tmp.replace(out)
  return out
