"""Sweeps: grid files, the local and Slurm backends, status and collection."""
