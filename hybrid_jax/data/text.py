"""Haystack text: RULER's repeated filler, prose generated from a seed, and corpus documents
split into sentence units (needles and retrieval pairs are inserted between units, so they
never split a word of the haystack)."""

import re

import numpy as np

# RULER's "noise" haystack, one sentence per unit (a leading space joins units).
FILLER = (" The grass is green.", " The sky is blue.", " The sun is yellow.", " Here we go.",
          " There and back again.")

ADJECTIVES = tuple("""
abundant agreeable ancient bitter brave breezy bright broad calm careful cheerful clever
cloudy crimson curious dazzling delicate distant eager early elegant empty fancy fierce
fragile gentle gigantic glossy golden graceful hollow humble icy jolly keen lively lonely
lucky mellow mighty misty modest narrow nimble noisy odd orange patient plain polite proud
quiet rapid rustic scarlet shiny silent silver sleepy smooth snowy sturdy swift tender
tidy tranquil vivid wakeful wandering witty wooden yellow zealous
""".split())

NOUNS = tuple("""
anchor apple arrow badge bakery balloon basket beacon blanket bottle bridge bucket cabin
candle canyon castle cellar chimney cloud compass cottage crystal dolphin dragon engine
falcon feather fingerprint forest fountain garden glacier hammer harbor helmet island
jacket kettle ladder lantern lemon library meadow mirror monument mountain needle orchard
ostrich palace parrot pebble pencil pepper pigeon planet pocket quilt rabbit river rocket
saddle scarf shadow shelter spider statue stone teapot temple thunder tiger tower tunnel
umbrella valley violin wagon walrus window
""".split())

# A small lexicon for prose generated from a seed (when no corpus is given).
_FUNCTION = tuple("""
the the the a a of of of to to and and in in is was that it for on with as by at from
this which but not be are or have had they we he she his her their its one all there
""".split())
_CONTENT = ADJECTIVES + NOUNS + tuple("""
walk walked read wrote built carried found gave kept learned left made moved opened saw
seemed told took turned became brought called came grew held knew lost met paid ran sang
spoke stood thought went watched wondered people time year day way man woman child world
life hand part place case week company system program question work government number
night point home water room mother area money story fact month lot right study book eye
job word business issue side kind head house service friend father power hour game line
end member law car city community name president team minute idea kid body information
back parent face others level office door health person art war history party result
change morning reason research girl guy moment air teacher force education
""".split())


_WORDS = np.array(_FUNCTION + _CONTENT)
_PROBS = np.concatenate([np.full(len(_FUNCTION), 3.0), 1.0 / np.arange(1, len(_CONTENT) + 1) ** 0.8])
_PROBS /= _PROBS.sum()


def generated_sentences(rng: np.random.Generator, n_chars: int) -> list[str]:
  """At least ``n_chars`` characters of English-like prose, one sentence (with a leading space)
  per unit: a Zipf mix of function and content words, so there is local structure to model."""
  words, probs = _WORDS, _PROBS      # built once: this is on the mix's hot path
  out, total = [], 0
  while total < n_chars:
    n_sent = max(4, (n_chars - total) // 60 + 1)
    lengths = rng.integers(5, 16, size=n_sent)
    ids = rng.choice(len(words), size=int(lengths.sum()), p=probs)
    chunks = np.split(words[ids], np.cumsum(lengths)[:-1])
    for chunk in chunks:
      s = " " + " ".join(chunk) + "."
      s = s[:1] + s[1].upper() + s[2:]
      out.append(s)
      total += len(s)
  return out


_SENTENCE_END = re.compile(r"(?<=[.!?\n])(?=\s)")


def sentence_units(text: str) -> list[str]:
  """Split after sentence ends, keeping all characters (the whitespace starts the next unit)."""
  return [u for u in _SENTENCE_END.split(text) if u]


def clean_document(text: str) -> str:
  """Collapse runs of blank lines and trailing spaces; keep paragraphs."""
  text = re.sub(r"[ \t]+\n", "\n", text.replace("\r\n", "\n").replace("\x00", ""))
  return re.sub(r"\n{3,}", "\n\n", text).strip()
