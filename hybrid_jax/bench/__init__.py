"""``hybrid-jax bench``: speed figures, not tests. One module per subcommand (train, mesh,
data, eval, kernels, mixers; ``hybrid_jax.commands.bench`` dispatches), one timing helper
and one peak-FLOP probe (``timing.py``), per-op profiles (``profile.py``) and the PyTorch peer
(``torch_peer.py``, run in its own process when torch is installed)."""


class BenchError(ValueError):
  """Bad benchmark arguments: one line, exit 2, before anything runs."""
