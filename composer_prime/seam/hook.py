"""Patches PRIME-RL inside every process of the environment, from a `.pth` line, without a fork.

PRIME-RL's algorithms are a closed set: `AlgoConfig` is a pydantic discriminated union and `ALGORITHM_CLASSES` a
dict, both defined at import time, with no plugin entry point (docs/prime-rl-integration.md). Every PRIME-RL
process that parses a config (the `rl` launcher, the orchestrator, env servers) re-parses its own TOML/JSON, so the
union must be extended in each of them before the config is validated.

The wheel installs `composer_prime_seam.pth` into site-packages; Python runs its single line at interpreter start,
which imports this module and puts `_Finder` on `sys.meta_path`. Until a target module is imported the finder does
nothing, and this module imports neither PRIME-RL nor torch. Right after a target module has executed, before any
other PRIME-RL module reads its names, the finder runs its patch (`TARGETS`):

- `prime_rl.configs.algorithm`: `algorithm.extend_algo_config` adds `ComposerAlgoConfig` to the `AlgoConfig` union;
- `prime_rl.configs.trainer`: `checks.check_loss_kwargs` makes a `[trainer.loss]` block that names
  `composer_prime.loss.composer_loss` validate its kwargs at parse time;
- `prime_rl.configs.orchestrator`, `prime_rl.configs.rl`: `checks.check_orchestrator_channels` and
  `checks.check_loss_channel` make `OrchestratorConfig` and `RLConfig` refuse a composer config in which a channel
  the algorithm turns on could not train (`composer_prime.algorithm.channels`);
- `prime_rl.orchestrator.algo`: `algorithm.register_algorithm` adds `ComposerAlgorithm` to `ALGORITHM_CLASSES`;
- `prime_rl.orchestrator.train_source`: `train_source.patch_train_source` lets `TrainSource.next_task` answer
  "nothing ready yet" for a taskset fed by live data instead of blocking the orchestrator's event loop;
- `prime_rl.orchestrator.train_sink`: `batch_caps.patch_train_sink` makes `TrainSink` drop the live sessions over
  their user or repository cap from each batch it cuts.

A seam that moved raises `errors.SeamMoved` naming the pinned commit. On a PRIME-RL with the `prime_rl.algorithms`
entry-point seam (docs/upstream.md) the algorithm arrives through composer-prime's entry point (`entry_point.py`),
and the two algorithm patches see it and leave PRIME-RL alone.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

TARGETS = {
    "prime_rl.configs.algorithm": "algorithm:extend_algo_config",
    "prime_rl.configs.trainer": "checks:check_loss_kwargs",
    "prime_rl.configs.orchestrator": "checks:check_orchestrator_channels",
    "prime_rl.configs.rl": "checks:check_loss_channel",
    "prime_rl.orchestrator.algo": "algorithm:register_algorithm",
    "prime_rl.orchestrator.train_source": "train_source:patch_train_source",
    "prime_rl.orchestrator.train_sink": "batch_caps:patch_train_sink",
}
"""PRIME-RL module -> `<module of composer_prime.seam>:<function>` run right after that module executes."""


def _apply(patch: str, module: ModuleType) -> None:
    seam_module, function = patch.split(":")
    getattr(importlib.import_module(f"composer_prime.seam.{seam_module}"), function)(module)


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, patch: str):
        self.inner = inner
        self.patch = patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _apply(self.patch, module)


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
    for name, patch in TARGETS.items():
        if name in sys.modules:
            _apply(patch, sys.modules[name])


install()
