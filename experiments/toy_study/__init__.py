"""What the four toy findings share: the toy setting and its run root (``config``), reading
finished runs into seed-aligned curves, statistics, tables and figures (``study``), and the
runners' common command line and steps (``runner``)."""
