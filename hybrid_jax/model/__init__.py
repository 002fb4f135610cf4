"""Flax NNX hybrid LMs: one file per token mixer, registered by pattern letter."""

from hybrid_jax.model.config import ModelConfig
from hybrid_jax.model.lm import LM, build_model

__all__ = ["LM", "ModelConfig", "build_model"]
