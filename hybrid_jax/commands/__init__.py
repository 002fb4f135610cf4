"""Each ``hybrid-jax`` command's ``main(argv) -> int``, one module a command (``fit_scaling``
is ``fit-scaling``; ``data_tokenizer`` is ``data tokenizer``): the parser and the calls into
the libraries below, so that a module's place says whether it is a command or a library.
``hybrid_jax.cli`` dispatches to them; nothing else of the package imports them."""
