"""Registers the `composer` algorithm inside PRIME-RL without a fork, from a `.pth` line.

PRIME-RL's algorithms are a closed set: `AlgoConfig` is a pydantic discriminated union and `ALGORITHM_CLASSES` a
dict, both defined at import time, with no plugin entry point (docs/prime-rl-integration.md). Every PRIME-RL
process that parses a config (the `rl` launcher, the orchestrator, env servers) re-parses its own TOML/JSON, so the
union must be extended in each of them before the config is validated.

The wheel installs `composer_prime_algorithm.pth` into site-packages; Python runs its single line at interpreter
start, which imports this module and puts `_Finder` on `sys.meta_path`. Until a target module is imported the
finder does nothing, and this module imports neither PRIME-RL nor torch. When `prime_rl.configs.algorithm` has
executed, `plugin.extend_algo_config` adds `ComposerAlgoConfig` to its `AlgoConfig` union, before any other PRIME-RL
module reads the name; when `prime_rl.configs.trainer` has executed, `plugin.check_loss_kwargs` makes a
`[trainer.loss]` block that names `composer_prime.loss.composer_loss` validate its kwargs at parse time; when
`prime_rl.configs.orchestrator` and `prime_rl.configs.rl` have executed, `plugin.check_orchestrator_channels` and
`plugin.check_loss_channel` make `OrchestratorConfig` and `RLConfig` refuse a composer config in which a channel the
algorithm turns on could not train (`channels.py`); when `prime_rl.orchestrator.algo` has executed,
`plugin.register_algorithm` adds `ComposerAlgorithm` to `ALGORITHM_CLASSES`; when
`prime_rl.orchestrator.train_source` has executed, `plugin.let_train_sources_wait` lets `TrainSource.next_task` answer
"nothing ready yet" for a taskset fed by live data instead of blocking the orchestrator's event loop
(`composer_prime/realtime/readiness.py`). A seam that moved raises an error naming the pinned commit.

On a PRIME-RL with the `prime_rl.algorithms` entry-point seam (docs/upstream.md) the algorithm arrives through
composer-prime's entry point (`entry_point.py`) and the hook only adds the loss-kwargs check: this module is the
fallback for PRIME-RL without that seam.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

TARGETS = {
    "prime_rl.configs.algorithm": "extend_algo_config",
    "prime_rl.configs.trainer": "check_loss_kwargs",
    "prime_rl.configs.orchestrator": "check_orchestrator_channels",
    "prime_rl.configs.rl": "check_loss_channel",
    "prime_rl.orchestrator.algo": "register_algorithm",
    "prime_rl.orchestrator.train_source": "let_train_sources_wait",
}
"""Module -> function of `composer_prime.algorithm.plugin` run right after that module executes."""


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, patch: str):
        self.inner = inner
        self.patch = patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        from composer_prime.algorithm import plugin

        getattr(plugin, self.patch)(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of the target modules; every other import passes through untouched."""

    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        patch = TARGETS.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, patch)
                return spec
        return None


def install() -> None:
    """Idempotent: put the finder first on `sys.meta_path` (and patch targets that are already imported)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    loaded = [(name, patch) for name, patch in TARGETS.items() if name in sys.modules]
    if loaded:
        from composer_prime.algorithm import plugin

        for name, patch in loaded:
            getattr(plugin, patch)(sys.modules[name])


install()
