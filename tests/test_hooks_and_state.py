"""The loop calls its hooks at log, eval and checkpoint steps (so ``train/`` needs neither
``eval/`` nor ``plot/``), and readers of a run build params only, never optimizer moments."""

import jax
import pytest

from conftest import tiny_config
from hybrid_jax.core.hooks import Hook
from hybrid_jax.eval.checkpoints import RunModels
from hybrid_jax.eval.evaluate import TrainingEval
from hybrid_jax.loading import load_run
from hybrid_jax.resolve import resolve
from hybrid_jax.run import RunDir, checkpoint_steps
from hybrid_jax.train import optim, state
from hybrid_jax.train.loop import train
from hybrid_jax.standard_run import CurvesAtEnd, standard_hooks


class Recorder(Hook):
  def __init__(self):
    self.calls = []

  def check(self, cfg):
    self.calls.append(("check", cfg.derived.steps))

  def start(self, run, graphdef, rest, step, params):
    self.calls.append(("start", step))

  def log(self, step, record):
    assert record["step"] == step
    self.calls.append(("log", step))

  def eval(self, step, params):
    self.calls.append(("eval", step))
    return {"score": float(step)}

  def checkpoint(self, step):
    self.calls.append(("checkpoint", step))

  def end(self, run):
    self.calls.append(("end", run.read_status()["state"]))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  c = tiny_config(steps=6)
  c.train.log_every, c.eval.every, c.checkpoint.every = 2, 3, 4
  hook = Recorder()
  workdir = tmp_path_factory.mktemp("hooks") / "run"
  status = train(c, workdir, progress=False, hooks=(hook,))
  return workdir, hook.calls, status


def test_hooks_are_called_at_log_eval_and_checkpoint_steps(trained):
  workdir, calls, status = trained
  assert status["state"] == "done"
  assert calls[:2] == [("check", 6), ("start", 0)]
  assert [s for k, s in calls if k == "log"] == [2, 4, 6]
  assert [s for k, s in calls if k == "eval"] == [3, 6]
  saved = [s for k, s in calls if k == "checkpoint"]
  assert {4, 6} <= set(saved) and set(checkpoint_steps(workdir)) <= set(saved)
  assert calls[-1] == ("end", "done")
  assert not (workdir / "curves.png").exists()   # the bare loop draws nothing
  assert not RunDir(workdir).read_eval()         # ... and evaluates nothing


def test_a_resumed_run_offers_its_restored_step_to_the_eval_hooks(trained, tmp_path):
  workdir, _, _ = trained
  c = tiny_config(steps=6)
  c.train.log_every, c.eval.every, c.checkpoint.every = 2, 3, 4
  hook = Recorder()
  train(c, workdir, progress=False, hooks=(hook,))     # already done: restores step 6
  assert ("start", 6) in hook.calls and ("eval", 6) in hook.calls
  assert not [k for k, _ in hook.calls if k in ("log", "checkpoint")]


def test_the_train_command_adds_evaluation_only_when_asked():
  c = resolve(tiny_config())
  assert [type(h) for h in standard_hooks(c)] == [CurvesAtEnd]
  c.eval.every = 4
  assert [type(h) for h in standard_hooks(c)] == [TrainingEval, CurvesAtEnd]


def test_readers_of_a_run_never_build_optimizer_moments(trained, monkeypatch):
  workdir, _, _ = trained

  def no_optimizer(*args, **kwargs):
    raise AssertionError("a reader built the optimizer")
  monkeypatch.setattr(optim, "make_optimizer", no_optimizer)
  monkeypatch.setattr(state, "make_optimizer", no_optimizer)
  models = RunModels(workdir)
  try:
    params = models.params(checkpoint_steps(workdir)[-1])
  finally:
    models.close()
  cfg, _ = load_run(workdir)
  _, abstract, _ = state.abstract_model(cfg.model, cfg.train.seed)
  _, _, fresh = state.init_params(cfg)
  assert jax.tree.structure(params) == jax.tree.structure(abstract) == jax.tree.structure(fresh)
  assert [x.shape for x in jax.tree.leaves(params)] == [x.shape for x in jax.tree.leaves(fresh)]


@pytest.mark.parametrize("seed", [0, 5, -3])
def test_init_takes_the_seed_as_an_argument_and_gives_the_constant_seeds_parameters(seed):
  """One compiled init serves every seed (a seed sweep loads it from the cache), and its
  parameters are bitwise those of the seed built in as a constant (``init_params``)."""
  cfg = tiny_config()
  cfg.train.seed = seed
  cfg = resolve(cfg)
  assert state.seed_argument(seed) == (seed,)
  _, _, train_state, _, _ = state.init_state(cfg)
  _, _, params = state.init_params(cfg)
  for a, b in zip(jax.tree.leaves(train_state["params"]), jax.tree.leaves(params), strict=True):
    assert a.dtype == b.dtype and bool((a == b).all())
  assert state.seed_argument(2 ** 40) == ()                 # outside int32: a constant


def test_the_next_batch_is_made_before_a_save_or_an_evaluation_waits_for_the_step(tmp_path, monkeypatch):
  """A save or an evaluation needs its step's state before the next step is dispatched:
  the next step's batch is already made (and placed) by then, so the device waits for the
  host copy alone, not for the input too."""
  from hybrid_jax.train import loop
  hook = Recorder()

  class Recorded(loop.Batches):
    def __next__(self):
      hook.calls.append(("batch", self.step))        # the batch of step self.step + 1
      return super().__next__()

  monkeypatch.setattr(loop, "Batches", Recorded)
  c = tiny_config(steps=6)
  c.train.log_every, c.eval.every, c.checkpoint.every = 2, 3, 4
  train(c, tmp_path / "run", progress=False, hooks=(hook,))
  order = [(k, s) for k, s in hook.calls if k in ("batch", "eval", "checkpoint")]
  assert [s for k, s in order if k == "batch"] == list(range(6))
  waits = [(k, s) for k, s in order if k in ("eval", "checkpoint") and s < 6]
  assert ("eval", 3) in waits and ("checkpoint", 4) in waits
  for k, s in waits:                                # step s + 1's batch was made before
    assert order.index(("batch", s)) < order.index((k, s)), order
