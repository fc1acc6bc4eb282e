"""The `composer` orchestrator algorithm's pure core: outcome advantages, hint targets and trace-replay credit.

- `config`: `ComposerAlgoConfig`, the `[orchestrator.algo]` settings (pydantic, no PRIME-RL import).
- `credit`: channel 1 (Dr. GRPO outcome advantage) and channel 3 (teacher verdicts to per-step credit), per token.
- `hints`: channel 2 (error-site hint targets, the prefill request, the reference stream).
- `scoring`: hint prefill scoring in the background, concurrent across episodes, bounded, with a deadline.
- `channels`: which channels a launch config trains, and the configs refused (plain dicts in, problems out).

None of these imports PRIME-RL; the adapter that wires them into PRIME-RL lives in `composer_prime.seam`.
Importing this package imports nothing.

May import: `composer_prime.teachers` (the `trace.info["teacher"]` schema), `composer_prime.evidence`.
"""
