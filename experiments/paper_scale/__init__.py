"""The paper-scale sweeps, to submit on accelerators."""
