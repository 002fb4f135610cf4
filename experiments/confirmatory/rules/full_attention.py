"""Finding 2 (mechanism): long-range retrieval is carried by the full-attention layers.

Judged on models that retrieve: a seed enters a capping, ablation or probing claim only when
its uncapped final far accuracy reaches protocol.RETRIEVES; with fewer than 3 such seeds the
claim is "inconclusive: model does not retrieve". The cap is smaller than the SWA window
(2 < 4), so capping the efficient layers is a test that can fail; the two halves of the cap
claim are judged apart."""

from experiments.confirmatory.arms import LF, SF4
from experiments.confirmatory.protocol import BEYOND, Claim

CAP = 2                  # the receptive field both constraints cap to (SF w=4: a real cut)
CAP_LF = 4               # the Lightning hybrid's cap (the exploratory study's)
K = 2                    # heads ablated, of the 8 full-attention heads
MARGIN = 0.1             # an accuracy drop below this is no effect
CLASSES = 8              # probe: the needle's value is one of 8
TASK = ["--task", "kv_recall", "--length", 64]
ANALYSES = {             # ``hybrid-jax analyze`` on each final checkpoint, needles beyond BEYOND
    "constrain": ["--window", CAP, "--samples", 64, "--short-rows", 32, "--beyond", BEYOND],
    "constrain_lf": ["--window", CAP_LF, "--samples", 64, "--short-rows", 32, "--beyond", BEYOND],
    "ablate": ["--k", K, "--mode", "zero", "--samples", 64, "--beyond", BEYOND],
    "probe": ["--classes", CLASSES, "--samples", 320, "--beyond", BEYOND],
}

METRICS = [
    ("uncapped far acc", f"kv_recall accuracy at T = 64 on needles > {BEYOND} tokens back, "
     "no cap (the analysis' own 64 samples): decides which seeds retrieve"),
    ("full-capped drop", f"uncapped far acc minus far acc with every full layer capped to its "
     f"last {CAP} tokens (LF: {CAP_LF})"),
    ("efficient-capped drop", f"the same with every efficient layer capped (SWA or Lightning "
     "alike: an output sees only its last W tokens)"),
    ("head drop", f"accuracy drop with the top-{K} retrieval heads zeroed minus the drop with "
     f"{K} random heads of the same layers zeroed"),
    ("probe rise", "probe accuracy rise through the first F layer minus the largest rise "
     "through any efficient layer"),
]

_CAP = dict(stands_for="the paper's receptive-field constraint (full layers to ~2,048 tokens "
                       "hurts log(LongPPL); efficient layers barely matter)",
            differs="caps of 2-4 tokens at T = 64 on synthetic recall, accuracy not LongPPL")

PRIMARY = Claim(
    "capping the full layers hurts", "primary",
    "restricting the full-attention layers' receptive field destroys long-range retrieval",
    effect=f"full-capped drop, SF w=4 capped at {CAP}", test="one_sample", arms=(SF4.label,),
    margin=MARGIN, side="above", needs_retrieval=True, **_CAP)

SECONDARY = (
    Claim("capping the efficient layers does not hurt", "secondary",
          "restricting the efficient layers barely matters",
          effect=f"efficient-capped drop, SF w=4 capped at {CAP}", test="one_sample",
          arms=(SF4.label,), margin=MARGIN, side="below", needs_retrieval=True, **_CAP),
    Claim("capping the full layers hurts, LF", "secondary",
          "restricting the full-attention layers' receptive field destroys long-range retrieval",
          effect=f"full-capped drop, LF capped at {CAP_LF}", test="one_sample", arms=(LF.label,),
          margin=MARGIN, side="above", needs_retrieval=True, **_CAP),
    Claim("capping the efficient layers does not hurt, LF", "secondary",
          "restricting the efficient layers barely matters, even for recurrent mixers",
          effect=f"efficient-capped drop, LF capped at {CAP_LF}", test="one_sample",
          arms=(LF.label,), margin=MARGIN, side="below", needs_retrieval=True, **_CAP),
    Claim("retrieval heads", "secondary", "a few retrieval heads carry retrieval",
          stands_for="the paper's top-4 retrieval heads by attention mass on the needle",
          differs=f"top-{K} of 8 heads at toy-xs; zero-ablation rather than tracing alone",
          effect=f"head drop, SF w=4", test="one_sample", arms=(SF4.label,), margin=MARGIN,
          side="above", needs_retrieval=True),
    Claim("probe", "secondary", "the value enters the residual stream through a full layer",
          stands_for="the paper's layer-wise logistic probes on 16K NIAH",
          differs=f"{CLASSES} value classes at T = 64, 2 layers",
          effect="probe rise, SF w=4", test="one_sample", arms=(SF4.label,), margin=0.0,
          side="above", needs_retrieval=True),
)

EXPLORATORY = ("GF and MF (seeds 0-2 have no stored checkpoints to analyse; not retrained "
               "here), the SWA-16/-32 caps of seeds 0-2",)
