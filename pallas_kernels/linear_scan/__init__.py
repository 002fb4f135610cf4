"""Scalar-decay linear attention ("simple GLA"): Lightning attention and Mamba-2's SSD."""

from pallas_kernels.linear_scan.api import simple_gla

__all__ = ["simple_gla"]
