"""``hybrid-jax analyze heads|trace|constrain|ablate|probe|gradient RUN ...``.

Every subcommand reads one checkpoint (``--step``, default the last) of a run directory and
writes ``<run>/analysis/<name>.json`` plus ``<name>.png``/``.svg``. Bad input is one line
(``hybrid-jax: error: ...``, exit 2) before any compute, and nothing is written.
"""

import resource
from pathlib import Path

import numpy as np

from hybrid_jax.analysis.mechanism import ablate, constrain, figures, gradient, heads, probe, trace
from hybrid_jax.analysis.mechanism.runs import (
    AnalysisInputError,
    DEFAULT_TASK,
    Run,
    check_positive,
    check_task,
    niah_examples,
    write_figure,
    write_json,
)
from hybrid_jax.cli_args import ArgumentParser
from hybrid_jax.model import registry
from hybrid_jax.model.params import layer_letters
from hybrid_jax.resolve import resolve
from hybrid_jax.run import load_config

SUBCOMMANDS = ("heads", "trace", "constrain", "ablate", "probe", "gradient")


def _parser():
  common = ArgumentParser(add_help=False)
  common.add_argument("--step", type=int, help="checkpoint step (default: the last)")
  common.add_argument("--task", default=DEFAULT_TASK, help="NIAH task of hybrid_jax.data.tasks")
  common.add_argument("--length", type=int, help="context length (default: the first eval length)")
  common.add_argument("--beyond", type=int, default=0,
                      help="only needles more than this many tokens before their answer (e.g. the "
                      "study's largest window); outputs get a -beyondW suffix")
  common.add_argument("--report-memory", action="store_true",
                      help="print the process's peak resident memory at the end")
  p = ArgumentParser(prog="hybrid-jax analyze", description="Run a mechanism analysis of one "
                     "checkpoint of a run.", epilog=__doc__.split("\n\n", 1)[1])
  sub = p.add_subparsers(dest="what", required=True)
  hea = sub.add_parser("heads", parents=[common], help="retrieval-head scores per (layer, head)")
  tra = sub.add_parser("trace", parents=[common], help="top heads over every checkpoint")
  for s in (hea, tra):
    s.add_argument("--top-k", type=int, default=4, help="heads reported as the retrieval heads")
    s.add_argument("--query-offset", type=int, default=0,
                   help="score the row this many tokens before the one preceding the answer")
  tra.add_argument("--reference-step", type=int, help="weights compared to (default: the last)")
  tra.add_argument("--out", help="directory for the trace figure (default: each run's analysis/)")
  tra.add_argument("--layers", help="only the heads of layers of these kinds (pattern letters, "
                   "e.g. F for the full-attention layers); writes trace-<LAYERS>.json "
                   "(default: every attention layer)")
  con = sub.add_parser("constrain", parents=[common], help="receptive-field constraint at inference")
  con.add_argument("--window", type=int, required=True,
                   help="W: every output sees only the last W tokens, in the full-attention "
                   "layers or in the efficient ones")
  con.add_argument("--short-rows", type=int, default=8, help="held-out rows of the short loss")
  abl = sub.add_parser("ablate", parents=[common], help="ablate the top-k heads vs random heads")
  abl.add_argument("--k", type=int, default=4, help="top retrieval heads ablated (and as many "
                   "random heads of the same layers, the control)")
  abl.add_argument("--mode", choices=("zero", "mean"), default="zero",
                   help="replace a head's output by zero or by its causal running mean")
  abl.add_argument("--seed", type=int, default=0, help="the draw of the random control heads")
  pro = sub.add_parser("probe", parents=[common], help="layer-wise logistic-regression probes")
  pro.add_argument("--classes", type=int, default=8,
                   help="needle values the probes tell apart (a closed set)")
  pro.add_argument("--delta", action="store_true", help="probe each layer's residual delta")
  pro.add_argument("--seed", type=int, default=0, help="the probes' train/test split")
  gra = sub.add_parser("gradient", parents=[common], help="gradient influence by distance")
  gra.add_argument("--targets", type=int, default=20,
                   help="the last N next-token predictions whose logits are differentiated")
  for s, samples in ((hea, 16), (tra, 16), (con, 16), (abl, 16), (pro, 64), (gra, 4)):
    s.add_argument("--samples", type=int, default=samples, help="NIAH examples")
    s.add_argument("run", nargs="+" if s is tra else None,
                   help="run directories (their curves share one figure)" if s is tra
                   else "a run directory")
  return p


def _n_heads(run: Run, kinds: str | None = None) -> int:
  """Attention heads of the run (of its layers whose letter is in ``kinds``, if given)."""
  m = resolve(load_config(run.path)).model
  return sum(m.n_heads for c in layer_letters(m.pattern, m.n_layers)
             if registry.get(c).kind != "recurrent" and (kinds is None or c in kinds))


def _check(args) -> list[Run]:
  """Every one-line error of the arguments and runs, before anything is computed."""
  check_positive("--samples", args.samples)
  check_positive("--beyond", args.beyond, 0)
  if args.what in ("heads", "trace"):
    check_positive("--top-k", args.top_k)
    check_positive("--query-offset", args.query_offset, 0)
  if args.what == "constrain":
    check_positive("--window", args.window)
    check_positive("--short-rows", args.short_rows, 0)
  if args.what == "ablate":
    check_positive("--k", args.k)
  if args.what == "probe":
    check_positive("--classes", args.classes, 2)
    if args.samples < args.classes:
      raise AnalysisInputError(f"--samples: {args.samples} is fewer than --classes {args.classes}")
  if args.what == "gradient":
    check_positive("--targets", args.targets)
  runs = [Run(r) for r in (args.run if isinstance(args.run, list) else [args.run])]
  for run in runs:
    run.check_step(args.step)
    if args.what == "trace" and args.reference_step is not None:
      run.check_step(args.reference_step)
    if args.length is None:
      args.length = int(load_config(run.path).eval.lengths[0])
    check_task(args.task, args.length, args.classes if args.what == "probe" else 0)
    if args.beyond or (args.what in ("heads", "trace") and args.query_offset):
      examples = _examples(args, run)   # --beyond: enough needles that far back, or one line
    if args.what in ("heads", "trace") and args.query_offset:
      first = min(int(ex.answer_positions[0]) for ex in examples)
      if args.query_offset > first - 1:
        raise AnalysisInputError(f"--query-offset: {args.query_offset} reaches before the start "
                                 f"of the examples (at most {first - 1} at --length {args.length})")
    kinds = getattr(args, "layers", None) if args.what == "trace" else None
    if kinds is not None and args.top_k > _n_heads(run, kinds):
      raise AnalysisInputError(f"--layers: the {kinds} layers of {run.path} have "
                               f"{_n_heads(run, kinds)} attention heads, fewer than --top-k "
                               f"{args.top_k}")
    k = {"heads": "top_k", "trace": "top_k", "ablate": "k"}.get(args.what)
    if k and getattr(args, k) > _n_heads(run):
      raise AnalysisInputError(f"--{k.replace('_', '-')}: {getattr(args, k)} is more than the "
                               f"{_n_heads(run)} attention heads of {run.path}")
    if args.what == "gradient" and args.targets >= args.length:
      raise AnalysisInputError(f"--targets: must be below --length {args.length}")
  return runs


def _examples(args, run):
  """The NIAH examples every subcommand scores (``--beyond``: only needles that far back)."""
  return niah_examples(run.cfg, args.task, args.length, args.samples, beyond=args.beyond,
                       n_classes=args.classes if args.what == "probe" else 0)


def _beyond(args) -> str:
  return f"-beyond{args.beyond}" if args.beyond else ""


def _letters(model) -> str:
  return "".join(b.letter for b in model.blocks)


def run_heads(args, run):
  step = run.check_step(args.step)
  model = run.model(step)
  scores = heads.head_scores(model, _examples(args, run), args.query_offset)
  top = heads.top_heads(scores, args.top_k)
  stem = run.out_dir / f"heads{_beyond(args)}-step{step}"
  rec = dict(step=step, task=args.task, length=args.length, samples=args.samples, beyond=args.beyond,
             query_offset=args.query_offset, letters=_letters(model), top_heads=[list(h) for h in top],
             **{k: np.where(np.isnan(v), None, v).tolist() for k, v in scores.items()})
  write_figure(figures.head_heatmap(scores["mass"], _letters(model), top,
                                    f"{run.path.name} step {step}: retrieval mass"), stem)
  write_figure(figures.head_heatmap(scores["copy"], _letters(model), top,
                                    f"{run.path.name} step {step}: copy-paste score"),
               stem.with_name(stem.name + "-copy"))
  return write_json(stem.with_suffix(".json"), rec), rec


def run_trace(args, runs):
  traces = []
  for run in runs:
    examples = _examples(args, run)
    traces.append(trace.trace_run(run, examples, args.top_k, args.reference_step, args.query_offset,
                                  log=lambda s, r=run: print(f"hybrid-jax analyze trace: {r.path.name} {s}"),
                                  layers=args.layers))
  stem = (f"trace-{args.layers}" if args.layers else "trace") + _beyond(args)
  paths = []
  for run, tr in zip(runs, traces):
    paths.append(write_json(run.out_dir / f"{stem}.json", dict(tr, task=args.task, length=args.length,
                                                               samples=args.samples, layers=args.layers,
                                                               beyond=args.beyond)))
  labels = [Path(r.path).name for r in runs]
  outs = [Path(args.out)] if args.out else [r.out_dir for r in runs]
  for out in outs:
    write_figure(figures.trace_figure(traces, labels), out / stem)
  return paths[0], traces


def run_constrain(args, run):
  step = run.check_step(args.step)
  model = run.model(step)
  examples = _examples(args, run)
  short = constrain.heldout(run.cfg, args.short_rows) if args.short_rows else None
  res = constrain.constrain(model, examples, args.window, short)
  rec = dict(step=step, window=args.window, task=args.task, length=args.length,
             samples=args.samples, beyond=args.beyond, short_text="held-out rows of the run's data source "
             "(hybrid_jax.eval.heldout, eval.short_length)", settings=res)
  stem = run.out_dir / f"constrain-W{args.window}{_beyond(args)}-step{step}"
  write_figure(figures.bars(res, ["acc", "answer_loss", "short_loss"] if short else ["acc", "answer_loss"],
                            f"{run.path.name} step {step}: receptive field capped at {args.window}"), stem)
  return write_json(stem.with_suffix(".json"), rec), rec


def run_ablate(args, run):
  step = run.check_step(args.step)
  model = run.model(step)
  examples = _examples(args, run)
  top = heads.top_heads(heads.head_scores(model, examples), args.k)
  try:
    res = ablate.ablation(model, examples, top, args.mode, args.seed)
  except ValueError as e:
    raise AnalysisInputError(f"--k: {e}") from None
  rec = dict(step=step, task=args.task, length=args.length, samples=args.samples, beyond=args.beyond,
             k=args.k, **res)
  stem = run.out_dir / f"ablate-k{args.k}-{args.mode}{_beyond(args)}-step{step}"
  write_figure(figures.bars({k: dict(acc=v, answer_loss=res["answer_loss"][k]) for k, v in res["acc"].items()},
                            ["acc", "answer_loss"], f"{run.path.name} step {step}: {args.mode}-ablation"), stem)
  return write_json(stem.with_suffix(".json"), rec), rec


def run_probe(args, run):
  step = run.check_step(args.step)
  model = run.model(step)
  examples = _examples(args, run)
  res = probe.layer_probe(model, examples, args.classes, args.delta, args.seed)
  rec = dict(step=step, task=args.task, length=args.length, samples=args.samples,
             beyond=args.beyond, classes=args.classes, letters=_letters(model), **res)
  stem = run.out_dir / f"probe{'-delta' if args.delta else ''}-C{args.classes}{_beyond(args)}-step{step}"
  write_figure(figures.probe_figure(res["accuracy"], res["chance"], _letters(model),
                                    f"{run.path.name} step {step}: probe of the needle value"
                                    + (" (residual deltas)" if args.delta else "")), stem)
  return write_json(stem.with_suffix(".json"), rec), rec


def run_gradient(args, run):
  step = run.check_step(args.step)
  model = run.model(step)
  tokens = np.stack([ex.tokens for ex in _examples(args, run)])
  res = gradient.influence(model, tokens, args.targets)
  rec = dict(step=step, task=args.task, letters=_letters(model), **res)
  stem = run.out_dir / f"gradient{_beyond(args)}-step{step}"
  write_figure(figures.gradient_figure(res, f"{run.path.name} step {step}: gradient influence"), stem)
  return write_json(stem.with_suffix(".json"), rec), rec


RUNNERS = dict(heads=run_heads, trace=run_trace, constrain=run_constrain, ablate=run_ablate,
               probe=run_probe, gradient=run_gradient)


def peak_rss_mib() -> float:
  """Peak resident memory of this process (Linux reports KiB)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv):
  args = _parser().parse_args(argv)
  try:                       # AnalysisInputError, EvalInputError: UserErrors, one line
    runs = _check(args)
    target = runs if args.what == "trace" else runs[0]
    path, _ = RUNNERS[args.what](args, target)
  finally:
    for run in locals().get("runs", []):
      run.close()
  print(f"hybrid-jax analyze {args.what}: wrote {path}")
  if args.report_memory:
    print(f"hybrid-jax analyze {args.what}: peak RSS {peak_rss_mib():.0f} MiB")
  return 0
