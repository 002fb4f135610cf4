"""Config schema (ml_collections), named sizes and the rules of the sections no other
package owns. A leaf: nothing here imports the rest of hybrid_jax; ``hybrid_jax.resolve``
composes every package's check into ``resolve``."""

from hybrid_jax.configs.base import base_config
from hybrid_jax.configs.rules import ConfigError, is_resolved, require_resolved

__all__ = ["base_config", "ConfigError", "is_resolved", "require_resolved"]
