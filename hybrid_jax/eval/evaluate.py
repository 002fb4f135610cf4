"""Evaluate checkpoints: every metric of one params pytree, and every not yet evaluated
checkpoint of a run, appended to ``<run>/eval.jsonl`` one JSON line per checkpoint."""

import time

import jax

from hybrid_jax.configs import ConfigError
from hybrid_jax.core.eval_settings import EvalSettings
from hybrid_jax.core.hooks import Hook
from hybrid_jax.eval.checkpoints import EvalInputError, RunModels
from hybrid_jax.eval.heldout import ShortLossEval
from hybrid_jax.eval.longppl import LongPPLEval
from hybrid_jax.eval.retrieval import RetrievalEval
from hybrid_jax.eval.scoring import Scorer
from hybrid_jax.resolve import ensure_resolved
from hybrid_jax.run import RunDir, checkpoint_steps, load_config
from hybrid_jax.run.checkpoints import is_finished


class Evaluator:
  """All metrics of one model family (graphdef + rest) under one set of settings. The
  evaluation data are built once; each forward shape is compiled once."""

  def __init__(self, cfg, graphdef, rest, reference: tuple | None = None):
    """``reference``: (graphdef, rest, params, step) of the LongPPL reference model, or None
    for the evaluated model itself."""
    self.settings = EvalSettings.from_config(cfg)
    self.scorer = Scorer(graphdef, rest)
    self.metrics = [ShortLossEval(cfg, self.settings), RetrievalEval(cfg, self.settings),
                    LongPPLEval.from_config(cfg, self.settings)]
    self.reference_step = None
    if reference is not None:
      ref_graphdef, ref_rest, ref_params, self.reference_step = reference
      self.metrics[2].set_reference(Scorer(ref_graphdef, ref_rest), ref_params)
    self.settings_id = self.settings.settings_id(self.reference_step)

  def __call__(self, params) -> dict:
    out = {}
    for metric in self.metrics:
      out.update(metric(self.scorer, params))
    return out

  def record(self, params, step: int, tokens: int) -> dict:
    t0 = time.perf_counter()
    metrics = self(params)
    settings = dict(self.settings.to_dict(), reference_step=self.reference_step
                    if self.reference_step is not None else self.settings.reference_step)
    return dict(step=step, tokens=tokens, settings_id=self.settings_id, **metrics,
                eval_seconds=round(time.perf_counter() - t0, 3), settings=settings)


def _reference(settings):
  """(graphdef, rest, params, step) of the LongPPL reference run, or None (the model itself)."""
  if settings.reference is None or not settings.longppl_rows:
    return None
  ref = RunModels(settings.reference)
  try:
    step = settings.reference_step or ref.steps[-1]
    return ref.graphdef, ref.rest, ref.params(step), step
  finally:
    ref.close()


def check_inputs(workdir, cfg) -> EvalSettings:
  """Every one-line error an evaluation can raise on bad input, before any compute."""
  settings = check_settings(cfg)
  checkpoint_steps(workdir)
  return settings


def check_settings(cfg) -> EvalSettings:
  """The settings' one-line errors (tasks, lengths, reference run), before any compute."""
  resolved = ensure_resolved(cfg)     # the trainer passes its resolved config: not again
  settings = EvalSettings.from_config(resolved)
  if settings.reference is not None and settings.longppl_rows:
    load_config(settings.reference)
    ref_steps = checkpoint_steps(settings.reference)
    if settings.reference_step is not None and settings.reference_step not in ref_steps:
      raise EvalInputError(f"reference run {settings.reference} has no checkpoint "
                           f"{settings.reference_step} (it has {', '.join(map(str, ref_steps))})")
  return settings


def refuse_failed(workdir, force: bool):
  """A run whose training failed (e.g. a NaN loss) would give NaN metrics at minutes per
  checkpoint: refused in one line unless ``force``."""
  status = RunDir(workdir).read_status() or {}
  if status.get("state") == "failed" and not force:
    raise EvalInputError(f"run {workdir} failed at step {status.get('step')} "
                         f"({status.get('error')}); its metrics would be meaningless; "
                         "--force evaluates it anyway")


def evaluate_run(workdir, cfg=None, *, force=False, log=print) -> list[dict]:
  """Evaluate every checkpoint of the run without a record for these settings; append one
  line per checkpoint to eval.jsonl and return the new records (none on a second call)."""
  cfg = load_config(workdir) if cfg is None else cfg
  refuse_failed(workdir, force)
  settings = check_inputs(workdir, cfg)
  run = RunDir(workdir)
  run.lock_eval()
  try:
    models = RunModels(workdir, cfg)
    try:
      evaluator = Evaluator(models.cfg, models.graphdef, models.rest, _reference(settings))
      done = {r["step"] for r in run.read_eval() if r.get("settings_id") == evaluator.settings_id}
      todo = [s for s in models.steps if s not in done]
      tokens_per_step = models.cfg.train.batch_size * models.cfg.data.seq_len
      new = []
      for i, step in enumerate(todo, 1):
        log(f"hybrid-jax eval: {run.path.name}: checkpoint {i}/{len(todo)} (step {step})...")
        if not is_finished(run.checkpoint_dir / str(step)):   # a live trainer dropped its rolling one
          log(f"hybrid-jax eval: {run.path.name} step {step}: checkpoint gone meanwhile; skipped")
          continue
        record = evaluator.record(models.params(step), step, step * tokens_per_step)
        run.append_eval(record)
        new.append(record)
        log(f"hybrid-jax eval: {run.path.name} step {step}: " + _summary(record))
      if not todo:
        log(f"hybrid-jax eval: {run.path.name}: all {len(models.steps)} checkpoints already "
            f"evaluated (settings {evaluator.settings_id})")
      return new
    finally:
      models.close()
  finally:
    run.unlock_eval()


class TrainingEval(Hook):
  """The trainer's evaluation hook: evaluate the params in memory at its eval steps, unless
  eval.jsonl already has that step under these settings (a resumed run re-evaluates
  nothing). Params at a step are bit-identical after a resume, so so are the records. The
  evaluator is built on first use."""

  def __init__(self):
    self.evaluator, self.done = None, None

  def check(self, cfg):
    check_settings(cfg)                  # bad eval settings: EvalInputError, one line
    if jax.process_count() > 1:
      raise ConfigError("config.eval.every: evaluation during multi-process training is not "
                        "supported; evaluate the checkpoints afterwards with hybrid-jax eval")
    self.cfg = cfg
    self.tokens_per_step = cfg.train.batch_size * cfg.data.seq_len

  def start(self, run, graphdef, rest, step, params):
    self.run, self.graphdef, self.rest = run, graphdef, rest

  def eval(self, step: int, params) -> dict | None:
    if self.evaluator is None:
      self.evaluator = Evaluator(self.cfg, self.graphdef, self.rest,
                                 _reference(EvalSettings.from_config(self.cfg)))
      self.done = {r["step"] for r in self.run.read_eval()
                   if r.get("settings_id") == self.evaluator.settings_id}
    if step in self.done:
      return None
    record = self.evaluator.record(params, step, step * self.tokens_per_step)
    self.run.append_eval(record)
    self.done.add(step)
    return record


def _summary(record) -> str:
  keys = ("short_loss", "retrieval_acc", "log_longppl", "eval_seconds")
  return ", ".join(f"{k}={record[k]:.4g}" for k in keys if record.get(k) is not None)
