"""The one name of a run's architecture, as figures, tables and reports show it."""


def architecture_label(model: dict) -> str:
  """"F", "SF w=4" (the window only where a layer uses it), "SF w=4 NoPE-full", "LF"."""
  out = model["pattern"]
  if any(ch in model["pattern"] for ch in "SH"):
    out += f" w={model['window']}"
  if model.get("pos_full") == "nope" and "F" in model["pattern"]:
    out += " NoPE-full"
  return out
