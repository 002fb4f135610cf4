"""A planned run as one JSON record and one table row (its step time beside its input time
on the topology's hosts); the grid's totals."""

from hybrid_jax.data import input_cost
from hybrid_jax.model.flops import model_flops_per_token
from hybrid_jax.plan.fit import Planned, budget, one_line
from hybrid_jax.plan.targets import Target, host_chips, hosts
from hybrid_jax.train.sharding import mesh_shape

GIB = 1024 ** 3


def roofline(model_flops_step: float, compiled, target: Target, replication: int) -> dict:
  """Step time bound by compute (the larger of the model's and the compiler's FLOPs per
  device at the chip's bf16 peak) or by HBM traffic (the compiler's bytes accessed)."""
  per_device = model_flops_step * replication / len(target.devices)
  flops = max(per_device, compiled.compiler_flops or 0.0)
  compute_s = flops / target.peak_flops_per_device
  memory_s = (compiled.bytes_accessed or 0.0) / target.hbm_bandwidth_per_device
  return dict(compute_s=compute_s, memory_s=memory_s, step_s=max(compute_s, memory_s),
              bound="compute" if compute_s >= memory_s else "memory")


def record(name: str, planned_run, p: Planned | None, target: Target, error: str | None = None) -> dict:
  """Every field ``hybrid-jax plan`` reports for one run."""
  out = dict(run=name, topology=target.name, chips=target.chips, devices=len(target.devices))
  cfg = planned_run if p is None else p.cfg
  if cfg is not None and "derived" in cfg:
    d = cfg.derived
    out.update(pattern=cfg.model.pattern, size=cfg.model.size, window=cfg.model.window,
               n=d.non_embedding_params, tokens=d.tokens, steps=d.steps,
               batch_size=cfg.train.batch_size, seq_len=cfg.data.seq_len,
               microbatches=cfg.train.microbatches, remat=cfg.model.remat,
               mesh=dict(data=cfg.mesh.data, fsdp=cfg.mesh.fsdp),
               kernels=dict(attention=cfg.model.attention_impl, recurrent=cfg.model.recurrent_impl))
    out["model_flops_per_step"] = model_flops_per_token(cfg) * cfg.train.batch_size * cfg.data.seq_len
  if error is not None or p is None:
    return dict(out, status="invalid", fits=False, reason=error)
  if p.compiled is None:
    return dict(out, status="does not compile", fits=False, reason=p.error)
  c = p.compiled
  replication = len(target.devices) // max(1, _split(c, target, cfg))
  r = roofline(out["model_flops_per_step"], c, target, replication) if p.fits else {}
  out.update(compiler_flops_per_device=c.compiler_flops,
             compiler_flops_per_step=None if c.compiler_flops is None else c.compiler_flops * len(target.devices),
             bytes_accessed_per_device=c.bytes_accessed,
             hbm_argument_bytes=c.argument_bytes, hbm_output_bytes=c.output_bytes,
             hbm_temp_bytes=c.temp_bytes, hbm_alias_bytes=c.alias_bytes, hbm_code_bytes=c.code_bytes,
             hbm_total_bytes=c.hbm_bytes, hbm_budget_bytes=int(budget(target)),
             batch_replication=replication, fits=p.fits, change=p.change,
             compile_s=round(c.compile_s, 1), reused_compile=p.reused, **r)
  out["chip_hours"] = r["step_s"] * out["steps"] * target.chips / 3600 if p.fits else None
  out["out_of_memory"] = c.out_of_memory
  if p.fits:
    out["status"] = "fits" if p.change is None else "fits with " + p.change
  else:
    out["status"] = "does not fit"
    out["reason"] = (f"needs {c.hbm_bytes / GIB:.1f} GiB per device of {budget(target) / GIB:.1f} "
                     f"GiB" + (" (the compiler refused it)" if c.out_of_memory else "")
                     + (f"; {p.note}" if p.note else ""))
  return out


def with_input(rec: dict, cfg, target: Target) -> dict:
  """``rec`` with its run's input time per step on one host of ``target`` (``input_cost``:
  the batch made here, over the host's share of the rows and its workers) and whether input,
  not the roofline step, bounds it. The host model is not part of the compile, so a record
  kept by ``--resume`` gets these afresh; a source that cannot be made here is an
  ``input_error``, not a failed plan."""
  if cfg is None or "derived" not in cfg:
    return rec
  n = hosts(target)
  vcpus = input_cost.host_vcpus(target.chip.name, min(target.chips, host_chips(target)))
  out = {k: v for k, v in rec.items() if k != "input_error"}
  out.update(hosts=n, host_vcpus=vcpus, input_workers=None, input_batch_s=None, input_s=None,
             input_bound=None)
  try:
    m = input_cost.input_seconds(cfg, n, vcpus)
  except Exception as e:        # a corpus or tokenizer this host cannot read
    return dict(out, input_error=one_line(e))
  out.update(input_workers=m["workers"], input_batch_s=m["batch_s"], input_s=m["input_s"])
  if out.get("step_s") is not None:
    out["input_bound"] = m["input_s"] > out["step_s"]
  return out


def host_model(records: list[dict]) -> str:
  """The host the input times assume, for the summary line."""
  measured = [r for r in records if r.get("input_s") is not None]
  if not measured:
    return "no input times"
  r = measured[0]
  workers = "/".join(str(w) for w in sorted({x["input_workers"] for x in measured}))
  return (f"input per step on {r['hosts']} host{'s' if r['hosts'] > 1 else ''} of "
          f"{r['host_vcpus']} vCPUs, {workers} workers each")


def _split(c, target, cfg) -> int:
  """Devices the batch is split over (the rest compute replicated rows)."""
  data, fsdp = mesh_shape(cfg.mesh, len(target.devices))
  return (data if "data" in c.batch_axes else 1) * (fsdp if "fsdp" in c.batch_axes else 1)


def _gib(x):
  return "-" if x is None else f"{x / GIB:.1f}"


def table(records: list[dict]) -> str:
  head = ["run", "N", "tokens", "model FLOP/step", "XLA FLOP/step", "args GiB", "out GiB",
          "temp GiB", "total GiB", "step s", "input s", "chip-h", "status"]
  rows = []
  for r in records:
    rows.append([r["run"], f"{r['n'] / 1e6:.1f}M" if "n" in r else "-",
                 f"{r['tokens']:.3g}" if "tokens" in r else "-",
                 f"{r['model_flops_per_step']:.3g}" if "model_flops_per_step" in r else "-",
                 f"{r['compiler_flops_per_step']:.3g}" if r.get("compiler_flops_per_step") else "-",
                 _gib(r.get("hbm_argument_bytes")), _gib(r.get("hbm_output_bytes")),
                 _gib(r.get("hbm_temp_bytes")), _gib(r.get("hbm_total_bytes")),
                 f"{r['step_s']:.3g}" if "step_s" in r else "-",
                 f"{r['input_s']:.3g}" if r.get("input_s") is not None else "-",
                 f"{r['chip_hours']:.3g}" if r.get("chip_hours") is not None else "-",
                 r["status"] + (f": {r['reason']}" if r.get("reason") else "")
                 + (", input-bound" if r.get("input_bound") else "")])
  widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
  fmt = lambda row: "  ".join(str(x).ljust(w) for x, w in zip(row[:-1], widths)) + "  " + row[-1]
  return "\n".join([fmt(head)] + [fmt(r) for r in rows])


def totals(records: list[dict]) -> dict:
  fitting = [r for r in records if r.get("fits")]
  return dict(runs=len(records), fit=len(fitting),
              fit_with_change=sum(1 for r in fitting if r.get("change")),
              do_not_fit=sum(1 for r in records if r["status"] == "does not fit"),
              do_not_compile=sum(1 for r in records if r["status"] == "does not compile"),
              invalid=sum(1 for r in records if r["status"] == "invalid"),
              input_bound=sum(1 for r in records if r.get("input_bound")),
              chip_hours=sum(r["chip_hours"] for r in fitting),
              tokens=sum(r.get("tokens", 0) for r in fitting),
              model_flops=sum(r["model_flops_per_step"] * r["steps"] for r in fitting))
