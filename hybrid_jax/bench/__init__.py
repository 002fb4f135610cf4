"""``hybrid-jax bench``: speed figures, not tests. One module per subcommand (train, mesh,
data, eval, kernels, mixers; ``hybrid_jax.commands.bench`` dispatches), one timing helper
and one peak-FLOP probe (``timing.py``), per-op profiles (``profile.py``) and the PyTorch peer
(``torch_peer.py``, run in its own process when torch is installed)."""

from hybrid_jax import overrides
from hybrid_jax.errors import UserError

class BenchError(UserError, ValueError):
  """Bad benchmark arguments: one line, exit 2, before anything runs (a UserError, so that
  the ``python -m`` benches' ``run_tool`` prints it as one line too)."""


def run_config(path, argv, setup=None, default=None):
  """The config a bench runs, read as ``train`` reads its own (``hybrid_jax.overrides``):
  ``--config FILE`` (``path``; when None, ``default``, else the toy default), then
  ``setup(config)`` (the bench's own flags), then the ``--config.KEY=VALUE`` arguments
  ``argv``, which so win over the flags. A mistake is one BenchError line."""
  try:
    requested = overrides.parse(argv)
    config = overrides.load_config_file(path or default)
    if setup is not None:
      setup(config)
    return overrides.apply(config, requested)
  except UserError as e:
    raise BenchError(str(e)) from None


def add_config(parser, default: str = "the toy default, hybrid_jax/configs/default.py"):
  """A bench's ``--config FILE`` option (its overrides stay in the arguments that
  ``parse_known_args`` leaves, for ``run_config``)."""
  parser.add_argument("--config", default=None, metavar="FILE",
                      help=f"config file defining get_config() (default: {default})")
