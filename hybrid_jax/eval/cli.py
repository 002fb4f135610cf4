"""``hybrid-jax eval``: evaluate every checkpoint of a run not yet evaluated.

Settings are the run's config.json eval section, then ``--config.eval.KEY=VALUE`` overrides
(keys: hybrid_jax/configs/base.py, section eval); only ``eval.*`` may change, the model and
data are the run's. One line per checkpoint is appended to RUN/eval.jsonl. The default
settings take about half a minute per checkpoint of the toy default on a 2-core CPU (28 s
for the first, 34 s for each further one; `hybrid-jax bench eval` times it on this
machine); see docs/evaluation.md for the settings that make it fast.
"""

from absl import flags
from ml_collections import config_flags

from hybrid_jax.cli_args import ArgumentParser, unset, unset_overrides
from hybrid_jax.errors import UserError, one_line
from hybrid_jax.run import load_config

PROG = "hybrid-jax eval"


def _parser():
  p = ArgumentParser(prog=PROG, description=__doc__.split("\n", 1)[1].strip(),
                     usage=f"{PROG} --workdir RUN [--force] [--config.eval.KEY=VALUE ...]")
  p.add_argument("--workdir", required=True, metavar="RUN", help="The run directory to evaluate.")
  p.add_argument("--force", action="store_true",
                 help="Evaluate a run whose training failed (refused otherwise: its loss was "
                      "not finite, so every metric would be too).")
  return p


def parse_eval_flags(argv: list[str]):
  """(config, workdir, force): the run's config with the eval overrides applied."""

  args, rest = _parser().parse_known_args(argv)
  for a in rest:
    if not a.startswith("--config.eval."):
      raise UserError(f"eval: unknown flag {a.split('=', 1)[0]} (eval takes --workdir, --force "
                      "and --config.eval.* overrides)")
  config = load_config(args.workdir)
  rest, unsets = unset_overrides(rest)
  full_argv = [PROG] + rest
  fv = flags.FlagValues()
  try:
    config_flags.DEFINE_config_dict("config", config, flag_values=fv, sys_argv=full_argv)
    fv(full_argv)
    config = fv.config
    unset(config, unsets, allowed_prefix="eval.")
  except flags.Error as e:
    raise UserError(one_line(e)) from None
  except (KeyError, AttributeError) as e:
    raise UserError(f"unknown config key in an override: {one_line(e)}") from None
  return config, args.workdir, args.force


def main(argv) -> int:
  config, workdir, force = parse_eval_flags(argv)
  try:
    from hybrid_jax.eval.evaluate import evaluate_run   # lazy: JAX, seconds; --help stays instant
    evaluate_run(workdir, config, force=force)
  except ImportError as e:
    raise UserError(one_line(e)) from e
  return 0
