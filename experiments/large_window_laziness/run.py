"""Finding 3, "Large-Window Laziness", in one command:

    python experiments/large_window_laziness/run.py [--root runs/toy_study] [--parallel 2]

Trains the runs of sweep.py that the root lacks (SWA/full hybrids with windows 4, 16, 32 of
T = 64, and full attention; three seeds), traces the retrieval heads of every hybrid over
its checkpoints (``hybrid-jax analyze trace``), and writes REPORT.md and its figures here.
Does a larger window delay the formation of the full-attention layers' retrieval heads?
"""

import json
import time

import numpy as np

from experiments.toy_study import config as T
from experiments.toy_study import runner, study
from hybrid_jax.model.params import layer_letters

FAR = study.mean_of("retrieval_acc/kv_recall/64/d0.00", "retrieval_acc/kv_recall/64/d0.25")
THRESHOLD = 0.25          # far accuracy taken as "emerged" (chance 1/64)
MASS_THRESHOLD = 0.1      # top-4 heads' mean mass on the needle taken as "formed" (~2/64 at init)
TRACE = dict(task="kv_recall", length=64, top_k=4, samples=32)


def trace(run, layers: str | None = None) -> dict:
  """The run's head trace: the top-4 heads of every layer, or of the ``layers`` kinds only."""
  out = run.path / "analysis" / (f"trace-{layers}.json" if layers else "trace.json")
  if not out.exists():
    study.cli("analyze", "trace", run.path, "--task", TRACE["task"], "--length", TRACE["length"],
              "--top-k", TRACE["top_k"], "--samples", TRACE["samples"],
              *(["--layers", layers] if layers else []))
  return json.loads(out.read_text())


def head_curves(tr: dict, key: str):
  """(tokens_K, the top heads' mean ``key`` at each checkpoint)."""
  pts = [p for p in tr["points"] if p["tokens"] > 0]
  return (np.array([p["tokens"] for p in pts], float),
          np.array([np.mean([h[key] for h in p["heads"]]) for p in pts]))


def formation_tokens(tokens_K, mass_K):
  """Tokens at which the heads' mean retrieval mass first reaches MASS_THRESHOLD (None: never).
  An absolute level, not a fraction of the final mass: heads that never form would otherwise
  "reach half their final mass" at the first checkpoint."""
  return study.tokens_to(tokens_K, mass_K, MASS_THRESHOLD)


def main(argv=None):
  inv = runner.train_missing(runner.parse(__doc__, __file__, argv))
  groups, full = build(inv.root)
  t1 = time.monotonic()
  traces = {name: [trace(r) for r in rs] for name, rs in groups.items()}       # where the top heads are
  f_traces = {name: [trace(r, "F") for r in rs] for name, rs in groups.items()}  # the F layers' top heads
  t_analysis = time.monotonic() - t1
  fig_name = draw(groups, full, f_traces, inv.out)
  write(inv, groups, full, summarise(groups, full, traces, f_traces), fig_name, t_analysis)


def build(root):
  """({window name: the SF runs}, the F runs), three seeds each (one line and exit otherwise)."""
  runs = study.load_runs(root)
  groups = {name: study.select(runs, size="toy-xs", pattern="SF", window=w, pos_full="rope",
                               budget=T.BUDGET)
            for name, w in T.WINDOWS.items()}
  full = study.select(runs, size="toy-xs", pattern="F", pos_full="rope", budget=T.BUDGET)
  runner.require_seeds("large_window_laziness", {**groups, "full": full}, root)
  return groups, full


def draw(groups, full, f_traces, out) -> str:
  """Emergence of far retrieval (eval curves) and of the retrieval heads (traces)."""
  fig, axes = runner.subplots(1, 5, figsize=(24, 4.2))
  emergence = {f"SF w={T.WINDOWS[n]}": study.curves(rs, FAR) for n, rs in groups.items()}
  emergence["F"] = study.curves(full, FAR)
  study.band_figure(axes[0], emergence, ylabel="kv_recall accuracy, distance 43-61 (T=64)",
                    chance=1 / 64)
  axes[0].set_title("far retrieval (beyond every window)")
  for ax, key, title in zip(axes[1:], ("mass", "norm_entropy", "q_rel_l2", "k_rel_l2"),
                            ("the F layers' top-4 heads: retrieval mass",
                             "their attention entropy / log(#keys)",
                             "their W_q distance to the final (relative L2)",
                             "their W_k distance to the final (relative L2)")):
    bands = {}
    for name, trs in f_traces.items():
      cs = [head_curves(tr, key) for tr in trs]
      common = sorted(set.intersection(*(set(c[0]) for c in cs)))
      vals = np.array([[dict(zip(*c))[t] for t in common] for c in cs])
      bands[f"SF w={T.WINDOWS[name]}"] = (np.array(common), vals)
    study.band_figure(ax, bands, ylabel=key)
    ax.set_title(title)
  return study.save_figure(fig, out / "laziness.png")


def summarise(groups, full, traces, f_traces) -> dict:
  """Per model: tokens to far retrieval per seed, final and peak accuracy; per hybrid also
  the F layers' heads' formation tokens and final mass, and where the top heads sit."""
  summary = {}
  for name, rs in list(groups.items()) + [("full", full)]:
    tok, vals = study.curves(rs, FAR)
    emerge = [study.tokens_to(tok, v, THRESHOLD) for v in vals]
    row = dict(emerge_raw=emerge, budget=float(tok[-1]),
               final=study.stats(vals[:, -1]), peak=study.stats(vals.max(axis=1)))
    if name in traces:
      form = [formation_tokens(*head_curves(tr, "mass")) for tr in f_traces[name]]
      final_mass = [head_curves(tr, "mass")[1][-1] for tr in f_traces[name]]
      in_full = [np.mean([T_letter(r, h[0]) == "F" for h in tr["top_heads"]])
                 for r, tr in zip(groups[name], traces[name])]
      row.update(formation_raw=form, mass=study.stats(final_mass),
                 in_full=study.stats(in_full))
    summary[name] = row
  return summary


def write(inv, groups, full, summary, fig_name, t_analysis):
  rows = []
  for name, row in summary.items():
    label = f"SF w={T.WINDOWS[name]}" if name in T.WINDOWS else "F (no window)"
    rows.append([label, study.tokens_cell(row["emerge_raw"]), row["final"],
                 study.tokens_cell(row["formation_raw"]) if "formation_raw" in row else "-",
                 row.get("mass", "-"), row.get("in_full", "-")])
  table = study.markdown_table(
      ["model (3 seeds)", f"tokens to far acc >= {THRESHOLD} (M)", "final far acc",
       f"F heads: tokens to mass >= {MASS_THRESHOLD} (M)", "F heads: final top-4 mass",
       "share of the top-4 heads of any layer in F layers"], rows)

  all_runs = [r for rs in groups.values() for r in rs] + full
  train_sum, train_wall = study.train_minutes(all_runs)
  verdict = _verdict(summary)
  report = f"""# Large-Window Laziness at toy scale

Command: `python experiments/large_window_laziness/run.py` (on a 2-core CPU; runs are shared
with the other findings under `{inv.root}`).

## Question
Does a larger sliding window delay the formation of the full-attention layers' retrieval
heads (and so the emergence of long-range retrieval)?

## Setting, and why
toy-xs (4 layers, d=64, 0.2M non-embedding parameters), SWA/full 1:1 (`SFSF`), the
synthetic source at T = 64 with 8 key/value pairs per row (query-to-evidence distances
log-uniform on [1, 64]), 30 N = 5.9M tokens, lr 3e-3 cosine; three seeds per model.
Windows 4 / 16 / 32 are 1/16, 1/4 and 1/2 of the context. At T = 64 the large window
already answers ~83% of the training pairs by itself (distance <= 32), the small one ~33%:
the regime where the paper's large windows let the efficient layers solve most of the loss.
Far retrieval is measured where no window reaches: `kv_recall` at distances 43-61
(depths 0 and 0.25 of a 64-token context, 32 examples each, every 100 steps).
Retrieval heads: `hybrid-jax analyze trace --layers F` picks the final checkpoint's top-4
heads of the full-attention layers (by attention mass on the needle from the answer
position, kv_recall at length 64, 32 examples at depths spread over the context) and
scores them at every saved checkpoint, with their attention entropy and the relative L2
distance of their W_q and W_k slices to their final values (Q/K drift: how late the heads'
weights are still moving). The same trace without `--layers` finds the top-4 heads of any
layer; the table's last column says how many of those sit in full-attention layers.

## Result
![laziness]({fig_name})

{table}

Mean ± sample std [min, max] over seeds. "never": seeds that did not reach the threshold
within the budget (left out of that mean).

{verdict}

## Cost
Training: {train_sum:.0f} core-minutes for the {len(all_runs)} runs ({train_wall:.0f} minutes on
two workers, from each run's checkpoint timestamps); this command's own wall time was
{(inv.train_seconds + t_analysis) / 60:.1f} minutes ({inv.train_seconds / 60:.1f} training the runs the root
lacked, {t_analysis / 60:.1f} tracing heads; analyses already under each run's `analysis/` are reused, so a rerun
only redraws: experiments/README.md gives their from-scratch time).
"""
  runner.write(inv, report)


def T_letter(run, layer: int) -> str:
  return layer_letters(run.model["pattern"], run.config["model"]["n_layers"])[layer]


def _verdict(summary) -> str:
  small, medium, large = (summary[n] for n in T.WINDOWS)
  ws = " / ".join(map(str, T.WINDOWS.values()))
  med = [np.median(study.censored(r["emerge_raw"])) for r in (small, medium, large)]
  fmt = lambda x: "never" if not np.isfinite(x) else f"{x / 1e6:.2f}M"  # noqa: E731
  delayed = med[2] > med[0]
  apart = study.censored(large["emerge_raw"]).min() > study.censored(small["emerge_raw"]).max()
  monotone = med[0] <= med[1] <= med[2]
  good, bad = [], []
  emerged = (f"Far retrieval emerged after {' / '.join(map(fmt, med))} tokens (median over "
             f"seeds; \"never\": not within {large['budget'] / 1e6:.1f}M) for windows {ws}")
  if delayed:
    good.append(f"- {emerged}: the largest window is the slowest"
                + (", and every large-window seed is slower than every small-window seed."
                   if apart else ", but the seed ranges overlap, so at three seeds this is a "
                   "trend, not an established effect.")
                + ("" if monotone else " The medium window does not sit between the two."))
  else:
    bad.append(f"- {emerged}: the largest window is not slower than the smallest; laziness "
               "did not show in tokens to emergence at this scale.")
  form = [np.median(study.censored(r["formation_raw"])) for r in (small, medium, large)]
  line = (f"- The full layers' top-4 heads reached a retrieval mass of {MASS_THRESHOLD} after "
          f"{' / '.join(map(fmt, form))} tokens (median over seeds)")
  if form[2] > form[0]:
    good.append(line + ": later with the larger window.")
  else:
    bad.append(line + ": not later with the larger window.")
  mass = [r["mass"].mean for r in (small, medium, large)]
  if mass[2] < mass[0]:
    good.append(f"- At the end of training the full layers' top heads put {' / '.join(f'{m:.2f}' for m in mass)} "
                "of their attention on the needle: with the large window the full layers' "
                "retrieval heads are weaker, not only later.")
  in_full = [r["in_full"].mean for r in (small, medium, large)]
  if in_full[2] < in_full[0]:
    good.append(f"- The share of the top-4 retrieval heads that sit in full-attention layers is "
                f"{' / '.join(f'{x:.2f}' for x in in_full)}: with a larger window the strongest "
                "retrieval heads move into the SWA layers, which answer what their window "
                "reaches, and the full layers' heads are left weaker — the laziness mechanism.")
  final = [r["final"].mean for r in (small, medium, large)]
  converged = abs(final[2] - final[0]) <= 0.05
  line = (f"- Final far accuracy {' / '.join(f'{f:.2f}' for f in final)} (windows {ws}; "
          f"full attention {summary['full']['final'].mean:.2f})")
  if converged:
    good.append(line + ": the windows end level, as the study says they do given tokens.")
  else:
    bad.append(line + ": the windows have not converged within the 30 N budget. The study "
               "says they converge given tokens; here the large-window hybrid is still "
               "climbing or has not started, so showing convergence needs longer runs "
               "(the scaling finding's budgets stop at 30 N; ~100 N, ~20M tokens for toy-xs, "
               "i.e. ~25 minutes a run on one core, is the next step).")
  return study.verdict(good, bad)


if __name__ == "__main__":
  main()
