"""The `composer` orchestrator algorithm: outcome advantages, hint targets and trace-replay credit.

- `config`: `ComposerAlgoConfig`, the `[orchestrator.algo]` settings (pydantic, no PRIME-RL import).
- `credit`: channel 1 (Dr. GRPO outcome advantage) and channel 3 (teacher verdicts to per-step credit), per token.
- `hints`: channel 2 (error-site hint targets, the prefill request, the reference stream).
- `hook`: the import hook the package's `.pth` installs; it registers the algorithm when PRIME-RL is imported.
- `plugin`: the PRIME-RL side (config class in PRIME-RL's `AlgoConfig` union, `ComposerAlgorithm`), imported only
  from inside PRIME-RL processes.

Importing this package imports nothing: the `.pth` line runs in every Python process of the environment.
"""
