"""``hybrid-jax eval``: evaluate every checkpoint of a run not yet evaluated.

Settings are the run's config.json eval section, then ``--config.eval.KEY=VALUE`` overrides
(keys: hybrid_jax/configs/base.py, section eval); only ``eval.*`` may change, the model and
data are the run's. One line per checkpoint is appended to RUN/eval.jsonl. The default
settings take about half a minute per checkpoint of the toy default on a 2-core CPU (28 s
for the first, 34 s for each further one; `hybrid-jax bench eval` times it on this
machine); see docs/evaluation.md for the settings that make it fast.
"""

from hybrid_jax import overrides
from hybrid_jax.cli_args import ArgumentParser, usage
from hybrid_jax.errors import UserError, one_line
from hybrid_jax.run import load_config

PROG = "hybrid-jax eval"


def _parser():
  p = ArgumentParser(prog=PROG, description=__doc__.split("\n", 1)[1].strip(),
                     usage=usage(PROG, "--workdir RUN", "[--force]", "[--config.eval.KEY=VALUE ...]"))
  p.add_argument("--workdir", required=True, metavar="RUN", help="The run directory to evaluate.")
  p.add_argument("--force", action="store_true",
                 help="Evaluate a run whose training failed (refused otherwise: its loss was "
                      "not finite, so every metric would be too).")
  return p


def parse_eval_flags(argv: list[str]):
  """(config, workdir, force): the run's config with the eval overrides applied."""

  args, rest = _parser().parse_known_args(argv)
  eval_overrides = overrides.parse(rest, only="eval.", command="eval")   # before reading the run
  config = overrides.apply(load_config(args.workdir), eval_overrides)
  return config, args.workdir, args.force


def main(argv) -> int:
  config, workdir, force = parse_eval_flags(argv)
  try:
    from hybrid_jax.eval.evaluate import evaluate_run   # lazy: JAX, seconds; --help stays instant
    evaluate_run(workdir, config, force=force)
  except ImportError as e:
    raise UserError(one_line(e)) from e
  return 0
