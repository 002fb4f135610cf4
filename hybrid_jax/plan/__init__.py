"""``hybrid-jax plan``: will a run fit, and what will it cost, before anyone books hardware.

The train step is compiled deviceless for a named accelerator topology (a TPU slice through
libtpu, or H100/H200 GPUs through the CUDA plugin, on any host: ``pallas_kernels.targets``): the compiler's memory and cost analyses give the HBM per device and the
FLOPs, and a per-chip roofline the step time. See ``targets`` (a target's devices and per-device peaks),
``compile`` (one compiled step), ``fit`` (the smallest change that makes a run fit) and ``runs``
(plans of runs); the commands are ``hybrid_jax.commands.plan``.
"""
