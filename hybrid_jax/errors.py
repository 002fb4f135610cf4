"""The one exception type for failures a user caused (a bad flag, config, file or run).

``hybrid_jax.cli.main`` catches it once and prints its message as one line, exit 2; every
other exception is a bug and keeps its traceback. A leaf module: it imports nothing.
"""


class UserError(Exception):
  """A failure the user can fix; the message is one line and names what to change."""

  def __str__(self):
    return " ".join(super().__str__().split())    # one line, whatever the cause held


def one_line(e: BaseException, limit: int = 400) -> str:
  """An exception from a library as one readable line (theirs can span many, with escapes)."""
  text = " ".join(str(e).replace("\\n", " ").split()).replace("'", "").replace("\\", "")
  return (text[:limit] + "...") if len(text) > limit else text or type(e).__name__
