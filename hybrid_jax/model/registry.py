"""Pattern letter -> token mixer. A new mixer is one module in this package that calls
``register``; ``load_all`` imports every module here, so nothing else needs editing."""

import dataclasses
import importlib
import pkgutil
from pathlib import Path
from typing import Callable

KINDS = ("full", "swa", "headwise", "recurrent")


@dataclasses.dataclass(frozen=True)
class MixerSpec:
  letter: str
  name: str
  kind: str                                   # one of KINDS: what analyses call the layer
  build: Callable                             # (ModelConfig, rngs) -> nnx.Module, x_BxTxD -> y_BxTxD
  param_count: Callable                       # model_cfg -> int, exact
  state_size: Callable                        # (model_cfg, context) -> floats of inference state


_MIXERS: dict[str, MixerSpec] = {}
_loaded = False


def register(letter: str, name: str, kind: str, param_count: Callable, state_size: Callable):
  """Decorator for a mixer builder (a class or a function of (model_cfg, rngs); ``LM``
  passes the frozen ``hybrid_jax.model.config.ModelConfig``).

  The module it builds maps x [B, T, D] -> y [B, T, D] and, for decoding, has
  ``init_cache(batch, max_len)`` and ``step(x_Bx1xD, cache, pos) -> (y_Bx1xD, cache)``.
  ``state_size(model_cfg, context)`` is the floats of cache one sequence holds after
  ``context`` tokens (a plot axis: constant for recurrent mixers and SWA)."""
  if len(letter) != 1 or not letter.isupper():
    raise ValueError(f"mixer letter must be one upper-case letter; got {letter!r}")
  if kind not in KINDS:
    raise ValueError(f"mixer kind must be one of {KINDS}; got {kind!r}")

  def wrap(build):
    if letter in _MIXERS and _MIXERS[letter].build is not build:
      raise ValueError(f"mixer letter {letter!r} is already taken by {_MIXERS[letter].name}")
    _MIXERS[letter] = MixerSpec(letter, name, kind, build, param_count, state_size)
    return build
  return wrap


def load_all():
  """Import every module beside this one (each registers its mixers), found on disk: the
  registry names no module of the package, so the modules can import it."""
  global _loaded
  if not _loaded:
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
      importlib.import_module(f"{__package__}.{info.name}")
    _loaded = True


def letters() -> str:
  load_all()
  return "".join(sorted(_MIXERS))


def get(letter: str) -> MixerSpec:
  load_all()
  if letter not in _MIXERS:
    raise KeyError(f"unknown mixer letter {letter!r}; known: {letters()}")
  return _MIXERS[letter]
