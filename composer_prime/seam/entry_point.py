"""The `prime_rl.algorithms` entry point: `[orchestrator.algo] type = "composer"` on a PRIME-RL with the algorithm
plugin seam (the change proposed in docs/upstream.md).

PRIME-RL loads this module while `prime_rl.configs.algorithm` executes, after `BaseAlgoConfig` is defined, and adds
`ComposerAlgoConfig` to its `AlgoConfig` union; its orchestrator imports the runtime class the config names
(`algorithm_class`, `composer_prime.seam.algorithm.ComposerAlgorithm`). On PRIME-RL 559b447, which reads no entry
points, the `.pth` import hook (`hook.py`) registers the same classes instead.
"""

from prime_rl.configs.algorithm import BaseAlgoConfig

from composer_prime.seam.algorithm import config_class

ComposerAlgoConfig = config_class(BaseAlgoConfig)
