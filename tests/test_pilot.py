"""The device pilot (``python -m hybrid_jax.bench.pilot``) end to end at toy scale on CPU:
the summary holds the step time, input wait and, beside a plan record, the ratio to it."""

import json

import numpy as np

from hybrid_jax.bench import pilot
from hybrid_jax.data import corpus as C
from hybrid_jax.data.text import generated_sentences


def test_the_pilot_summarizes_step_time_input_wait_and_the_plans_roofline(tmp_path):
  src = tmp_path / "texts"
  src.mkdir()
  rng = np.random.default_rng(0)
  for i in range(12):
    (src / f"doc{i}.txt").write_text("".join(generated_sentences(rng, 3000)))
  C.build([str(src)], tmp_path / "corpus", validation_fraction=0.2)
  plan = tmp_path / "plan.jsonl"
  plan.write_text(json.dumps(dict(run="toy", topology="h100:1", step_s=0.01, input_s=0.001)) + "\n")
  out = pilot.main(["--corpus", str(tmp_path / "corpus"), "--tokenizer", "byte", "--size", "toy-xs",
                    "--seq-len", "128", "--batch-size", "4", "--steps", "6", "--log-every", "2",
                    "--workers", "0", "--plan", str(plan), "--out", str(tmp_path / "pilot.json")])
  assert json.loads((tmp_path / "pilot.json").read_text()) == out
  assert out["steps"] == 6 and out["step_s"] > 0 and 0 <= out["input_wait"] <= 1
  assert out["tokens_per_s"] == 4 * 128 / out["step_s"]
  assert out["mfu"] is None                      # a CPU has no entry in the chip table
  assert out["step_over_roofline"] == out["step_s"] / 0.01
  assert out["model_flops_per_step"] > 0 and out["tokenizer_vocab"] == 256
