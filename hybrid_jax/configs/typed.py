"""The frozen, typed views of resolved config sections that packages read at their
boundaries (``TrainConfig``, ``DataConfig``, ...; ``ModelConfig`` for the model): the
``ConfigDict`` stays the user-facing format, resolved once; what a package reads inside
is an object that can neither hold an unfilled ``None`` nor be changed by the code it
reaches. Each view lists its fields (the typed documentation); this base builds it."""

import dataclasses
from typing import ClassVar

from hybrid_jax.configs.rules import ConfigError


class FrozenSection:
  """Base of a frozen dataclass with every key of ``base_config().<SECTION>``, under the
  same names; ``OPTIONAL`` names the fields for which ``None`` is a setting."""
  SECTION: ClassVar[str]
  OPTIONAL: ClassVar[tuple[str, ...]] = ()

  @classmethod
  def from_config(cls, section):
    """From a resolved section (a ConfigDict or dict); an instance passes through. Lists
    become tuples (hashable, like the object); an unfilled field is one ConfigError line."""
    if isinstance(section, cls):
      return section
    values = {}
    for f in dataclasses.fields(cls):
      v = section[f.name]
      if v is None and f.name not in cls.OPTIONAL:
        raise ConfigError(f"config.{cls.SECTION}.{f.name}: unset; {cls.__name__} needs a resolved "
                          "config (hybrid_jax.resolve.resolve)")
      values[f.name] = tuple(v) if isinstance(v, list) else v
    return cls(**values)
