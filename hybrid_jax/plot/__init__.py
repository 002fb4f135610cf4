"""Figures: training curves now; emergence and scaling curves with the sweep tools."""
