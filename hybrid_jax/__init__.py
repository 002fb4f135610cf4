"""hybrid_jax: scaling studies of hybrid (full + efficient attention) language models."""

__version__ = "0.1.0"
