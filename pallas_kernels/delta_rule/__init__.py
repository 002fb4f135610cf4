"""Gated delta rule (Gated DeltaNet)."""

from pallas_kernels.delta_rule.api import gated_delta_rule

__all__ = ["gated_delta_rule"]
