"""Sequence-mixing kernels for hybrid_jax: one package per op, each with its reference.

Models call only ``<op>/api.py``; ``implementation="auto"`` picks the fastest path
available on the current backend.
"""
