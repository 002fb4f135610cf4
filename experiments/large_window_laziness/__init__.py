"""Finding 3: large-window laziness."""
