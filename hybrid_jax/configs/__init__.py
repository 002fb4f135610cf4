"""Config schema (ml_collections), named sizes, validation and resolution."""

from hybrid_jax.configs.base import base_config
from hybrid_jax.configs.validate import ConfigError, resolve, validate

__all__ = ["base_config", "ConfigError", "resolve", "validate"]
