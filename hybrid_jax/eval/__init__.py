"""Checkpoint evaluation: short-context held-out loss, long-context exact-match accuracy on
the synthetic tasks, and LongPPL; ``evaluate_run`` appends one eval.jsonl line per checkpoint.

Imports are light here (configs validation uses ``settings``); the evaluators live in
``hybrid_jax.eval.evaluate``.
"""
