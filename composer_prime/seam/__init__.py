"""The seam: every place composer-prime plugs into PRIME-RL by patching it, in one package.

- `hook`: the import hook the `composer_prime_seam.pth` line installs in every interpreter; it runs the patches
  below right after the PRIME-RL module each one targets has executed.
- `algorithm`: the `composer` algorithm inside PRIME-RL (its config class in `AlgoConfig`, `ComposerAlgorithm` in
  `ALGORITHM_CLASSES`), a thin adapter over the pure core in `composer_prime.algorithm`.
- `entry_point`: the same config class through the `prime_rl.algorithms` entry point, for a PRIME-RL with the
  algorithm plugin seam (docs/upstream.md).
- `checks`: launch configs refused at parse time (composer_loss kwargs, channels that could not train).
- `train_source`: `TrainSource.next_task` answers "nothing ready yet" for a taskset fed by live data.
- `errors`: `SeamMoved`, raised by every patch whose target is not shaped as PRIME-RL 559b447 has it.

Importing this package imports nothing: the `.pth` line runs in every Python process of the environment.

May import: `composer_prime.algorithm`, `composer_prime.loss_config`, `composer_prime.realtime.ingest` (`readiness`,
which imports nothing).
"""
