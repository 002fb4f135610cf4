"""Analyses of trained runs and sweeps: scaling-law fits (and, later, the mechanism analyses)."""
