"""``hybrid-jax plan``: will a run fit, and what will it cost, before anyone books hardware.

The train step is compiled deviceless for a named accelerator topology (a TPU slice through
libtpu, on any host): the compiler's memory and cost analyses give the HBM per device and the
FLOPs, and a per-chip roofline the step time. See ``targets`` (the hardware),
``compile`` (one compiled step), ``fit`` (the smallest change that makes a run fit) and ``cli``.
"""
