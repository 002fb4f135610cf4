"""One step builder: the loop, ``plan`` and ``bench`` trace the same train step."""

import jax

from conftest import tiny_config
from hybrid_jax.bench.train import make_step
from hybrid_jax.data import make_source
from hybrid_jax.plan.compile import planned_step
from hybrid_jax.resolve import resolve
from hybrid_jax.train import loop, sharding
from hybrid_jax.train.state import init_state


def test_loop_plan_and_bench_trace_the_same_train_step():
  c = tiny_config("SF")
  c.train.microbatches = 2                 # a builder that forgot the config's would differ
  cfg = resolve(c)
  mesh = sharding.make_mesh(cfg.mesh)
  graphdef, rest, state, tx, _ = init_state(cfg, mesh)
  batch = loop.step_batch(cfg, mesh, make_source(cfg).batch(0))
  ours = loop.run_step(cfg, mesh, graphdef, rest, tx, sharding.state_shardings(mesh, state))
  plan_step, plan_state, plan_batch = planned_step(cfg, mesh)
  bench_step, bench_state = make_step(cfg, mesh=mesh)
  texts = [str(f.trace(s, b).jaxpr) for f, s, b in ((ours, state, batch),
                                                      (plan_step, plan_state, plan_batch),
                                                      (bench_step, bench_state, batch))]
  assert "scan" in texts[0]                # the microbatches' accumulation is in the step
  assert texts[0] == texts[1] == texts[2]
  assert jax.tree.structure(plan_state) == jax.tree.structure(state)
