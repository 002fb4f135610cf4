"""What train, eval and resolve share, below all three, so that none imports another to get
it: the loop's hook protocol (``hooks``), the model's params-only state (``params_state``)
and the eval section's rules and settings (``eval_settings``, which resolve composes and
evaluation reads)."""
