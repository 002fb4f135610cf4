"""How the toy setting was chosen: retrieval accuracy by distance."""
