"""Finding 3 (Large-Window Laziness): a larger SWA window delays the formation of the full
layers' retrieval heads and of long-range retrieval.

A delay is judged apart from a failure to learn: when the large window's arm reaches the
threshold in no seed by the budget the verdict is "never learns", not "reproduced"."""

from experiments.confirmatory.arms import SF32, SF4
from experiments.confirmatory.protocol import BEYOND, READ_AT, THRESHOLD, Claim

MASS_THRESHOLD = 0.1     # the F layers' top-4 heads' mean mass on the needle ("formed"; ~2/64 at init)
DRIFT_THRESHOLD = 0.5    # W_q within this relative L2 distance of its final value
TRACE = ["--task", "kv_recall", "--length", 64, "--top-k", 4, "--samples", 32, "--layers", "F",
         "--beyond", BEYOND]      # ``analyze trace`` over every checkpoint: trace-F-beyond32.json

METRICS = [
    ("tokens to emerge", f"training tokens to far acc by distance (d >= {BEYOND}) >= {THRESHOLD}, "
     "censored at the budget"),
    ("tokens to form", f"training tokens until the F layers' top-4 heads (chosen on the final "
     f"checkpoint) have mean attention mass >= {MASS_THRESHOLD} on needles > {BEYOND} back"),
    ("entropy", f"those heads' attention entropy / log(#keys) at the checkpoint nearest "
     f"{READ_AT[0]:g} N"),
    ("Q drift", f"training tokens until those heads' W_q slices are within {DRIFT_THRESHOLD} "
     "relative L2 of their final values"),
    ("final far acc", "far acc by distance at the budget"),
]

_SPEED = dict(stands_for="the paper's emergence of RULER/LongPPL ability and of retrieval "
                         "heads, SWA-2048 against SWA-128",
              differs="windows 4 and 32 of T = 64 at toy-xs; tokens to a threshold")

PRIMARY = Claim(
    "emergence delay", "primary", "a larger window delays the emergence of long-range retrieval",
    effect="tokens to emerge, SF w=32 against SF w=4 (Gehan; ratio of medians printed)",
    test="gehan", arms=(SF4.label, SF32.label), margin=0.0, side="above", delay=True, **_SPEED)

SECONDARY = (
    Claim("head formation delay", "secondary",
          "a larger window delays the full layers' retrieval heads",
          effect="tokens to form, SF w=32 against SF w=4", test="gehan",
          arms=(SF4.label, SF32.label), margin=0.0, side="above", delay=True, **_SPEED),
    Claim("higher entropy", "secondary",
          "the large window's retrieval heads keep a higher attention entropy",
          stands_for="the paper's attention entropy H / log(#keys) of the retrieval heads",
          differs="64 keys at most; read at one budget",
          effect=f"entropy at {READ_AT[0]:g} N, SF w=32 minus SF w=4", test="permutation",
          arms=(SF4.label, SF32.label), margin=0.0, side="above"),
    Claim("slower Q drift", "secondary", "the large window's Q/K weights change more slowly",
          stands_for="the paper's per-head relative L2 distance of q_proj/k_proj slices",
          differs="distance to the final checkpoint; W_q only (W_k printed)",
          effect="Q drift, SF w=32 against SF w=4", test="gehan",
          arms=(SF4.label, SF32.label), margin=0.0, side="above", delay=True),
    Claim("convergence", "secondary", "given enough tokens the windows end level",
          stands_for="the paper's shrinking gap with training",
          differs="read at 30 N, the toy budget",
          effect="final far acc, SF w=32 minus SF w=4", test="tost",
          arms=(SF4.label, SF32.label), margin=0.1, side="within"),
)

EXPLORATORY = ("the window-16 arm and seeds 0-2",)
