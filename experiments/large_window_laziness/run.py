"""Finding 3, "Large-Window Laziness", in one command:

    python -m experiments.large_window_laziness.run [--root runs/toy_study] [--parallel 2]
    python -m experiments.large_window_laziness.run --report-only   # from experiments/data alone

Trains the runs of sweep.py that the root lacks (SWA/full hybrids with windows 4, 16, 32 of
T = 64, and full attention; three seeds), traces the retrieval heads of every hybrid over
its checkpoints (``hybrid-jax analyze trace``; scored on needles beyond every window,
``--beyond 32``, and on all needles), exports the runs' outputs and traces into
the committed store (experiments/data/toy_study) and writes REPORT.md and its figure here
from the store. Does a larger window delay the formation of the full-attention layers'
retrieval heads?
"""

import json

import numpy as np

from experiments.report import Report
from experiments.toy_study import bootstrap as B
from experiments.toy_study import config as T
from experiments.toy_study import measures as M
from experiments.toy_study import runner, study
from experiments.toy_study import verdicts as V

FAR = study.mean_of("retrieval_acc/kv_recall/64/d0.00", "retrieval_acc/kv_recall/64/d0.25")
DEPTHS = {d: study.mean_of(f"retrieval_acc/kv_recall/64/d{d:.2f}") for d in T.EVAL_DEPTHS}
THRESHOLD = 0.25          # far accuracy taken as "emerged" (chance 1/64)
MASS_THRESHOLD = 0.1      # top-4 heads' mean mass on the needle taken as "formed" (~2/64 at init)
HALF = 0.5                # the first report's metric: half of the heads' final mass
DRIFT_THRESHOLD = 0.5     # W_q / W_k within this relative L2 distance of their final values
CONVERGED = 0.05          # final far accuracies this close count as converged
TRACE = dict(task="kv_recall", length=64, top_k=4, samples=32)
BEYOND = max(T.WINDOWS.values())   # heads scored on needles > this many tokens back: out of every window
FAR_DIST = M.pooled(64, BEYOND)    # far accuracy by distance: the bins d >= BEYOND at T = 64
NEEDLES = {"beyond": f"needles > {BEYOND} tokens back", "all": "all needles"}


def trace_name(layers: str | None, needles: str) -> str:
  """The trace file: ``trace[-F][-beyond32].json``."""
  return ("trace" + (f"-{layers}" if layers else "")
          + (f"-beyond{BEYOND}" if needles == "beyond" else "") + ".json")


TRACES = tuple(trace_name(layers, needles) for needles in NEEDLES for layers in (None, "F"))

CLAIMS = (
    V.Claim("emergence delay", "a larger window delays the emergence of long-range retrieval",
            f"median tokens to far acc >= {THRESHOLD}, window 32 / window 4", 1.0, "above"),
    V.Claim("head formation delay", "a larger window delays the full layers' retrieval heads",
            f"median tokens until the F layers' top-4 heads' mean mass >= {MASS_THRESHOLD} "
            f"on needles > {BEYOND} tokens back, window 32 / window 4", 1.0, "above"),
    V.Claim("convergence", "given enough tokens the windows end level",
            "final far acc, window 32 minus window 4", CONVERGED, "within"),
    V.Claim("emergence delay by distance", "a larger window delays the emergence of long-range "
            "retrieval", f"as emergence delay, with far acc by distance (bins d >= {BEYOND})",
            1.0, "above"),
    V.Claim("convergence by distance", "given enough tokens the windows end level",
            f"as convergence, with far acc by distance (bins d >= {BEYOND})", CONVERGED, "within"),
)
METRICS = [
    ("far acc", "kv_recall accuracy at T = 64, depths 0 and 0.25 (distance 43-61, beyond "
     "every window), 32 examples a depth, every 100 steps"),
    ("far acc by distance", f"kv_recall accuracy at T = 64 over the distance bins wholly "
     f"beyond every window (d >= {BEYOND}), every depth pooled (`retrieval_acc_by_distance`); "
     "intervals Binomial on the bins' example counts"),
    ("tokens to far acc", f"the first evaluated token count with far acc (or far acc by "
     f"distance) >= {THRESHOLD}; a seed that never reaches it is censored (\"> budget\"), never "
     "dropped"),
    ("accuracy per depth", "final kv_recall accuracy at T = 64 per depth"),
    ("accuracy per distance", "final kv_recall accuracy at T = 64 and 128 per distance bin, "
     "every depth pooled"),
    ("needles", f"every head metric is measured on needles more than {BEYOND} tokens before "
     f"their answer (`analyze trace --beyond {BEYOND}`, `trace-F-beyond{BEYOND}.json`, "
     f"`trace-beyond{BEYOND}.json`: out of every window's reach; the headline) and on all "
     "needles (`trace-F.json`, `trace.json`: as before)"),
    ("F-head formation, absolute mass", f"tokens until the F layers' top-4 heads' mean "
     f"retrieval mass reaches {MASS_THRESHOLD} (censored)"),
    ("F-head formation, half-final mass", f"tokens until that mass reaches {HALF:g} x its "
     "final value"),
    ("any-layer formation, half-final mass", "the same for the top-4 heads of any layer "
     "(the first report's metric, on all needles)"),
    ("any-layer formation, absolute mass", f"tokens until the any-layer top-4 heads' mass "
     f"reaches {MASS_THRESHOLD}"),
    ("final mass, entropy", "the F heads' final mean mass and attention entropy / log(#keys)"),
    ("Q/K drift", f"tokens until the F heads' W_q (W_k) slices are within {DRIFT_THRESHOLD} "
     "relative L2 of their final values"),
    ("share in F layers", "share of the any-layer top-4 heads that sit in full-attention layers"),
]
# The record of the metric changed after the first result (issue 18): the first report's
# numbers, from the runs it was made from (no longer stored), and what was changed.
FIRST_REPORT = dict(
    metric="tokens until the top-4 heads of any layer reached half their final mass",
    tokens_M=(1.49, 1.09, 1.34),
    verdict="not later with the larger window (the claim was not supported)")
CHANGED = ("After that result the metric was changed to an absolute mass of "
           f"{MASS_THRESHOLD}, restricted to the full-attention layers' top-4 heads, and the "
           "verdict flipped. The change was made after seeing the result: the head-formation "
           "verdict is therefore exploratory; every metric, old and new, is printed below and "
           "judged by the same rule.")
CHANGED_LATER = f"""Changed with issue 18, to remove confounds (the old versions stay printed):
- **Heads on needles beyond every window**: the traces averaged each head's mass over 32
  needles at depths spread over the context, so some lay inside the SWA window, where SWA
  heads can score; the head-share trend (the last column) was confounded by that. Every head
  metric is now headlined on needles more than {BEYOND} tokens back (`--beyond {BEYOND}`) and
  the head-formation claim is judged on them; the all-needle traces are printed beside them
  and in the table below.
- **Far accuracy by distance**: "far acc" pools depths 0 and 0.25, mixing a needle's
  position with its distance. Per-distance bins are now measured; "far acc by distance" pools
  the bins wholly beyond every window (d >= {BEYOND}) over every depth, and the emergence and
  convergence claims are judged on it too, beside the old ones."""
PROVIDED = f"""## What the evaluation and analyses provide, and what they still do not
- Provided: accuracy per evidence-to-answer distance bin with its example count
  (`hybrid-jax eval`: `retrieval_acc_by_distance`, `retrieval_n_by_distance`), printed with
  Binomial intervals on the counts; head traces on needles beyond every window
  (`hybrid-jax analyze trace --beyond {BEYOND}`). A store without them prints
  "{M.NOT_MEASURED}".
- Not provided: per-example records (each needle's distance and each head's mass on it).
  No claim here needs them: `--beyond` selects the needles, and the distance bins' edges
  include the largest window, {BEYOND}."""


def main(argv=None):
  inv = runner.train_missing(runner.parse(__doc__, __file__, argv))
  if not inv.report_only:
    groups, full = select(runner.root_runs(inv))
    runner.require_seeds(inv, {**groups, "full": full}, "root")
    for rs in groups.values():
      for r in rs:
        for needles in NEEDLES:
          trace(r, None, needles)
          trace(r, "F", needles)
    runner.export(inv, [r for rs in groups.values() for r in rs] + full, TRACES)
  groups, full = select(runner.stored_runs(inv))
  runner.require_seeds(inv, {**groups, "full": full}, "store")
  # traces[needles][window name] = ([any-layer trace per seed], [F-layer trace per seed])
  traces = {needles: {name: ([read_trace(r, trace_name(None, needles)) for r in rs],
                             [read_trace(r, trace_name("F", needles)) for r in rs])
                      for name, rs in groups.items()} for needles in NEEDLES}
  shown = "beyond" if _traced(traces["beyond"]) else "all"
  fig_name = draw(groups, full, {n: f for n, (_, f) in traces[shown].items()}, shown, inv.out)
  write(inv, groups, full, summarise(groups, full, traces), fig_name)


def trace(run, layers: str | None = None, needles: str = "all"):
  """Trace the run's top-4 heads (of every layer, or of the ``layers`` kinds; on all needles
  or on those beyond every window) unless done."""
  if not (run.path / "analysis" / trace_name(layers, needles)).exists():
    study.cli("analyze", "trace", run.path, "--task", TRACE["task"], "--length", TRACE["length"],
              "--top-k", TRACE["top_k"], "--samples", TRACE["samples"],
              *(["--layers", layers] if layers else []),
              *(["--beyond", BEYOND] if needles == "beyond" else []))


def read_trace(run, name: str) -> dict | None:
  """A stored trace; a missing beyond-window trace is None (not measured: a store from
  before `--beyond`), a missing all-needle trace one line and exit."""
  path = run.path / "analysis" / name
  if path.exists():
    return json.loads(path.read_text())
  if "-beyond" in name:
    return None
  raise SystemExit(f"large_window_laziness: {run.path.name} has no analysis/{name} in the "
                   f"store (fill it with: python -m experiments.large_window_laziness.run)")


def _traced(traces_of_set) -> bool:
  return all(t is not None for a, f in traces_of_set.values() for t in a + f)


def select(runs):
  """({window name: the SF runs}, the F runs)."""
  groups = {name: study.select(runs, size="toy-xs", pattern="SF", window=w, pos_full="rope",
                               budget=T.BUDGET)
            for name, w in T.WINDOWS.items()}
  full = study.select(runs, size="toy-xs", pattern="F", pos_full="rope", budget=T.BUDGET)
  return groups, full


def head_curves(tr: dict, key: str):
  """(tokens_K, the top heads' mean ``key`` at each checkpoint), or None when not traced."""
  pts = [p for p in tr["points"] if p["tokens"] > 0]
  if not pts or any(key not in h for p in pts for h in p["heads"]):
    return None
  return (np.array([p["tokens"] for p in pts], float),
          np.array([np.mean([h[key] for h in p["heads"]]) for p in pts]))


def crossing(curve, threshold, below=False) -> float | None:
  """Tokens at which a head curve first reaches ``threshold`` (+inf: never; None: not traced)."""
  if curve is None:
    return None
  tokens_K, v_K = curve
  return float(B.first_crossing_K(tokens_K, -v_K if below else v_K, -threshold if below else threshold))


def formation(tr, how: str) -> float | None:
  """Tokens to head formation: ``absolute`` (mass >= MASS_THRESHOLD) or ``half`` (>= HALF x
  the final mass)."""
  c = head_curves(tr, "mass")
  if c is None:
    return None
  return crossing(c, MASS_THRESHOLD if how == "absolute" else HALF * c[1][-1])


def head_metrics(runs, at, ft) -> dict:
  """Per head metric its per-seed values from the any-layer traces ``at`` and the F-layer
  traces ``ft`` (None for a seed whose trace is missing: not measured)."""
  each = lambda fn, trs: [None if t is None else fn(t) for t in trs]   # noqa: E731
  return dict(
      form_abs=each(lambda t: formation(t, "absolute"), ft),
      form_half=each(lambda t: formation(t, "half"), ft),
      any_half=each(lambda t: formation(t, "half"), at),
      any_abs=each(lambda t: formation(t, "absolute"), at),
      mass=each(lambda t: _last(head_curves(t, "mass")), ft),
      entropy=each(lambda t: _last(head_curves(t, "norm_entropy")), ft),
      q_drift=each(lambda t: crossing(head_curves(t, "q_rel_l2"), DRIFT_THRESHOLD, below=True), ft),
      k_drift=each(lambda t: crossing(head_curves(t, "k_rel_l2"), DRIFT_THRESHOLD, below=True), ft),
      in_full=[None if t is None else np.mean([letter(r, h[0]) == "F" for h in t["top_heads"]])
               for r, t in zip(runs, at)])


def summarise(groups, full, traces) -> dict:
  """Per model the per-seed values every metric is made of (``heads[needles]``: the head
  metrics on needles beyond every window and on all needles)."""
  summary = {}
  for name, rs in list(groups.items()) + [("full", full)]:
    tok, vals = study.curves(rs, FAR)
    measured = M.measured(rs, FAR_DIST)
    row = dict(tokens=tok, far=vals, n=study.examples_of(rs, FAR), budget=float(tok[-1]),
               far_dist=study.curves(rs, FAR_DIST)[1] if measured else None,
               n_dist=M.examples(rs, FAR_DIST),
               depths={d: study.curves(rs, m)[1][:, -1] for d, m in DEPTHS.items()},
               n_depth=study.examples_of(rs, DEPTHS[T.EVAL_DEPTHS[0]]))
    if name in groups:
      row["heads"] = {needles: head_metrics(rs, *traces[needles][name]) for needles in NEEDLES}
    summary[name] = row
  return summary


def _last(curve):
  return None if curve is None else float(curve[1][-1])


def letter(run, layer: int) -> str:
  """The pattern letter of ``layer`` (layer i is pattern[i % len(pattern)])."""
  pattern = run.model["pattern"]
  return pattern[layer % len(pattern)]


def draw(groups, full, f_traces, needles, out) -> str:
  """Emergence of far retrieval (eval curves) and of the retrieval heads (traces of the F
  layers' heads, on ``needles``)."""
  fig, axes = runner.subplots(1, 5, figsize=(24, 4.2))
  emergence = {f"SF w={T.WINDOWS[n]}": study.curves(rs, FAR) for n, rs in groups.items()}
  emergence["F"] = study.curves(full, FAR)
  study.band_figure(axes[0], emergence, ylabel="kv_recall accuracy, distance 43-61 (T=64)",
                    chance=1 / 64)
  axes[0].set_title("far retrieval (beyond every window)")
  for ax, key, title in zip(axes[1:], ("mass", "norm_entropy", "q_rel_l2", "k_rel_l2"),
                            (f"the F layers' top-4 heads ({NEEDLES[needles]}): retrieval mass",
                             "their attention entropy / log(#keys)",
                             "their W_q distance to the final (relative L2)",
                             "their W_k distance to the final (relative L2)")):
    bands = {}
    for name, trs in f_traces.items():
      cs = [None if tr is None else head_curves(tr, key) for tr in trs]
      if any(c is None for c in cs):
        continue
      common = sorted(set.intersection(*(set(c[0]) for c in cs)))
      vals = np.array([[dict(zip(*c))[t] for t in common] for c in cs])
      bands[f"SF w={T.WINDOWS[name]}"] = (np.array(common), vals)
    if bands:
      study.band_figure(ax, bands, ylabel=key)
    ax.set_title(title if bands else title + " (not measured)")
  return study.save_figure(fig, out / "laziness.png")


def _cell(values, f=lambda x: f"{x:.3g}", how=B.median) -> str:
  """A metric's per-seed values as "estimate [95% interval]", or "not measured"."""
  if any(v is None for v in values):
    return "not measured"
  return how(values).fmt(f)


def write(inv, groups, full, summary, fig_name):
  budget = summary["full"]["budget"]
  tok = V.tokens_fmt(budget)
  rows = []
  for name, row in summary.items():
    label = f"SF w={T.WINDOWS[name]} ({len(groups[name])})" if name in T.WINDOWS else f"F ({len(full)})"
    emerge = B.median_crossing(row["tokens"], row["far"], THRESHOLD, row["n"]).fmt(tok)
    dist = ([B.median_crossing(row["tokens"], row["far_dist"], THRESHOLD, row["n_dist"]).fmt(tok),
             B.mean(row["far_dist"][:, -1], row["n_dist"])] if row["far_dist"] is not None
            else [M.NOT_MEASURED] * 2)
    rows.append([label, emerge, B.mean(row["far"][:, -1], row["n"]), *dist,
                 *[B.mean(row["depths"][d], row["n_depth"]) for d in T.EVAL_DEPTHS]])
  table = study.markdown_table(
      ["model (seeds)", f"tokens to far acc >= {THRESHOLD}, median", "final far acc",
       f"tokens to far acc by distance >= {THRESHOLD}, median", "final far acc by distance"]
      + [f"final acc, depth {d:g}" for d in T.EVAL_DEPTHS], rows)
  distance_table = M.distance_table(
      {f"SF w={T.WINDOWS[n]}": rs for n, rs in groups.items()} | {"F": full}, T.EVAL_LENGTHS, BEYOND)
  head_tables = {needles: _head_table(groups, summary, needles, tok) for needles in NEEDLES}
  judged = _judge(summary, tok)
  all_runs = [r for rs in groups.values() for r in rs] + full
  train_sum, train_wall = study.train_minutes(all_runs)
  ws = " / ".join(map(str, T.WINDOWS.values()))
  report = Report("Large-Window Laziness at toy scale", f"""\
Command: `python -m experiments.large_window_laziness.run` (on a 2-core CPU; runs are shared
with the other findings under `{T.ROOT}`);
`python -m experiments.large_window_laziness.run --report-only` regenerates this report and
its figure from the committed run outputs in `experiments/data/toy_study/`,
{runner.SAME_AS_MADE}.""")
  report.add(V.rules_section(METRICS, list(CLAIMS)))
  report.section("Question", """\
Does a larger sliding window delay the formation of the full-attention layers' retrieval
heads (and so the emergence of long-range retrieval)?""")
  report.section("Setting, and why", f"""\
toy-xs (4 layers, d=64, 0.2M non-embedding parameters), SWA/full 1:1 (`SFSF`), the
synthetic source at T = 64 with 8 key/value pairs per row (query-to-evidence distances
log-uniform on [1, 64]), 30 N = 5.9M tokens, lr 3e-3 cosine; three seeds per model.
Windows {ws} are 1/16, 1/4 and 1/2 of the context. At T = 64 the large window
already answers ~83% of the training pairs by itself (distance <= 32), the small one ~33%:
the regime where the paper's large windows let the efficient layers solve most of the loss.
Retrieval heads: `hybrid-jax analyze trace --layers F --beyond {BEYOND}` picks the final
checkpoint's top-4 heads of the full-attention layers (by attention mass on the needle from
the answer position, kv_recall at length 64, 32 examples whose needle lies more than {BEYOND}
tokens before the answer: beyond every window, so no SWA head can score on them) and scores
them at every saved checkpoint, with their attention entropy and the relative L2 distance of
their W_q and W_k slices to their final values (Q/K drift). The same trace without
`--layers` finds the top-4 heads of any layer; without `--beyond`, the traces score all
needles (depths spread over the context), as before.""")
  report.section("Result", f"![laziness]({fig_name})", table, distance_table,
                 f"""Heads on {NEEDLES["beyond"]} (the headline):""", head_tables["beyond"],
                 f"""Heads on {NEEDLES["all"]} (as before):""", head_tables["all"], f"""\
Token counts: median over seeds; accuracies, masses and shares: mean over seeds; each with
its 95% bootstrap interval [over seeds, and for accuracies over evaluation examples too].
"> {budget / 1e6:.2f}M": not reached within the budget (censored, counted as slower than any
seed that got there). "{M.NOT_MEASURED}": the store lacks the trace or eval key.""")
  report.add(V.verdicts_section(judged))
  report.section("Changed metrics", f"""\
The first report of this finding measured head formation as the {FIRST_REPORT['metric']}:
{' / '.join(f'{x:.2f}' for x in FIRST_REPORT['tokens_M'])}M tokens for windows {ws}, i.e.
{FIRST_REPORT['verdict']}. {CHANGED}""", CHANGED_LATER, _changed_table(summary, tok))
  report.add(PROVIDED)
  report.section("Cost", f"""\
Training: {train_sum:.0f} core-minutes for the {len(all_runs)} runs ({train_wall:.0f} minutes on
two workers, from each run's checkpoint timestamps, stored in each run's `train.json`);
tracing the heads took ~20 s a run and trace (experiments/README.md; four traces a run).""")
  runner.write(inv, report.text())


def _head_table(groups, summary, needles, tok) -> str:
  """Every head metric per window, on one set of needles ("beyond" or "all")."""
  head_rows = []
  for name in T.WINDOWS:
    row = summary[name]["heads"][needles]
    head_rows.append([f"SF w={T.WINDOWS[name]} ({len(groups[name])})",
                      _cell(row["form_abs"], tok), _cell(row["form_half"], tok),
                      _cell(row["any_half"], tok), _cell(row["any_abs"], tok),
                      _cell(row["mass"], how=B.mean), _cell(row["entropy"], how=B.mean),
                      _cell(row["q_drift"], tok), _cell(row["k_drift"], tok),
                      _cell(row["in_full"], how=B.mean)])
  return study.markdown_table(
      ["model (seeds)", f"F heads: tokens to mass >= {MASS_THRESHOLD}",
       f"F heads: tokens to {HALF:g} x final mass", f"any layer: tokens to {HALF:g} x final mass",
       f"any layer: tokens to mass >= {MASS_THRESHOLD}", "F heads: final mass",
       "F heads: final entropy / log(#keys)", f"F heads: tokens to W_q drift <= {DRIFT_THRESHOLD}",
       f"F heads: tokens to W_k drift <= {DRIFT_THRESHOLD}", "share of any-layer top-4 in F layers"],
      head_rows)


def _changed_table(summary, tok) -> str:
  """Every head-formation metric, old and new, on either set of needles, judged by the
  head-formation claim's rule."""
  rows = []
  for needles, note in (("all", ", all needles"), ("beyond", f", needles > {BEYOND} back")):
    for key, what in (("any_half", "any layer, half the final mass"),
                      ("form_half", "F layers, half the final mass"),
                      ("any_abs", f"any layer, mass >= {MASS_THRESHOLD}"),
                      ("form_abs", f"F layers, mass >= {MASS_THRESHOLD}")):
      label = what + note + {("all", "any_half"): " (the first report's)",
                             ("all", "form_abs"): " (the second report's)",
                             ("beyond", "form_abs"): " (the current one)"}.get((needles, key), "")
      values = {n: summary[n]["heads"][needles][key] for n in T.WINDOWS}
      cells = [_cell(values[n], tok) for n in T.WINDOWS]
      small, large = values["small"], values["large"]
      if any(v is None for v in small + large):
        rows.append([label, *cells, M.NOT_MEASURED, "-"])
        continue
      iv = B.ratio_of_median_values(large, small)
      rows.append([label, *cells, iv, V.decide(CLAIMS[1], iv)])
  return study.markdown_table(
      ["head-formation metric"] + [f"w={w}" for w in T.WINDOWS.values()]
      + ["w=32 / w=4 [95% interval]", "verdict by the same rule"], rows)


def _emergence_and_convergence(summary, tok, key: str, n_key: str, claims) -> list:
  """The emergence-delay and convergence claims on the far metric ``key`` (``far`` by depth,
  ``far_dist`` by distance); inconclusive when the store lacks it."""
  small, medium, large = (summary[n] for n in T.WINDOWS)
  full = summary["full"]
  if any(r[key] is None for r in (small, medium, large, full)):
    void = B.Interval(np.nan, np.nan, np.nan, 0)
    why = f"{M.NOT_MEASURED}: the stored eval records lack `{M.ACC}`."
    return [V.judge(c, void, why) for c in claims]
  name = "far acc" if key == "far" else "far acc by distance"
  med = [B.median_crossing(r["tokens"], r[key], THRESHOLD, r[n_key]).fmt(tok)
         for r in (small, medium, large)]
  emerge = B.ratio_of_medians(small["tokens"], large[key], small[key], THRESHOLD, small[n_key])
  final = [B.mean(r[key][:, -1], r[n_key]).point for r in (small, medium, large)]
  conv = B.difference(large[key][:, -1], small[key][:, -1], large[n_key])
  full_med = B.median_crossing(full["tokens"], full[key], THRESHOLD, full[n_key]).fmt(tok)
  ws = " / ".join(map(str, T.WINDOWS.values()))
  return [
      V.judge(claims[0], emerge, f"Median tokens to {name} {THRESHOLD}: {' / '.join(med)} for "
              f"windows {ws}; full attention {full_med}. (A ratio of inf: window 32 never got "
              "there while window 4 did.)"),
      V.judge(claims[1], conv, f"Final {name} {' / '.join(f'{f:.2f}' for f in final)} for "
              f"windows {ws} (full attention {B.mean(full[key][:, -1]).point:.2f}) after 30 N. "
              "The paper's convergence is over 100-1000 N; 30 N is what this CPU study "
              "afforded, so \"not reproduced\" here means \"not converged by 30 N\"."),
  ]


def _judge(summary, tok) -> list:
  heads = {n: summary[n]["heads"]["beyond"]["form_abs"] for n in ("small", "large")}
  measured = None not in heads["large"] + heads["small"]
  form = (B.ratio_of_median_values(heads["large"], heads["small"]) if measured
          else B.Interval(np.nan, np.nan, np.nan, 0))
  far = _emergence_and_convergence(summary, tok, "far", "n", (CLAIMS[0], CLAIMS[2]))
  dist = _emergence_and_convergence(summary, tok, "far_dist", "n_dist", CLAIMS[3:5])
  return [far[0], V.judge(CLAIMS[1], form, (
      f"On needles > {BEYOND} tokens back. Exploratory: this metric replaced the first "
      "report's after its result (see Changed metrics, which judges every head metric on "
      "both sets of needles)." if measured else
      f"{M.NOT_MEASURED}: the store has no `trace-F-beyond{BEYOND}.json` (made by `analyze "
      f"trace --beyond {BEYOND}`); the all-needle version is judged under Changed metrics.")),
      far[1], *dist]


if __name__ == "__main__":
  main()
