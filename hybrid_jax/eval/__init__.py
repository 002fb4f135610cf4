"""Checkpoint evaluation: short-context held-out loss, long-context exact-match accuracy on
the synthetic tasks, and LongPPL; ``evaluate_run`` appends one eval.jsonl line per checkpoint.

Imports are light here; the evaluators live in ``hybrid_jax.eval.evaluate``, the eval
section's rules and settings in ``hybrid_jax.core.eval_settings`` (``resolve`` composes them,
and evaluation resolves the configs of the runs it reads).
"""
