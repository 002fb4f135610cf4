"""Finding 4: NoPE on the full-attention layers only."""
