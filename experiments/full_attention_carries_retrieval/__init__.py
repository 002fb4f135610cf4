"""Finding 2: full attention carries retrieval in hybrids."""
