"""Exporters of trained runs to formats other tools read (``hf``: Hugging Face transformers)."""
