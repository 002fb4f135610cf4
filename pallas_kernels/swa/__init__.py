"""Sliding-window causal attention: query i sees keys j with i - w < j <= i."""

from pallas_kernels.swa.api import sliding_window_attention

__all__ = ["sliding_window_attention"]
