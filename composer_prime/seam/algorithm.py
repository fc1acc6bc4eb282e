"""The `composer` algorithm inside PRIME-RL: its config class in `AlgoConfig` and `ComposerAlgorithm`.

Imported only from inside a PRIME-RL process: by the import hook (`hook.py`) right after the PRIME-RL module it
patches has executed, or by the `prime_rl.algorithms` entry point (`entry_point.py`). Everything the algorithm
computes lives in the pure core (`composer_prime.algorithm`: `credit.py`, `hints.py`, `scoring.py`); this adapter
wires it to PRIME-RL's hooks: `score_episode` starts prefill-scoring hint targets through the live policy pool
(`InferencePool.score`) in the background (`scoring.py`: concurrent across episodes, bounded, with a deadline) and
`score_group` waits for its episodes' scores, then assigns outcome + replay advantages with PRIME-RL's
`assign_advantages`.
"""

from __future__ import annotations

import functools
import operator
import sys
import typing
from types import ModuleType
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from composer_prime.algorithm.config import ComposerAlgoConfig
from composer_prime.algorithm.credit import check_rewards, group_advantages
from composer_prime.algorithm.scoring import HintScoring
from composer_prime.seam.errors import seam_moved


def config_class(base: type) -> type:
    """PRIME-RL's config class of the algorithm: `base` (PRIME-RL's `BaseAlgoConfig`) plus the composer settings.

    Built by the `prime_rl.algorithms` entry point (`entry_point.py`) on a PRIME-RL with that seam, else by
    `extend_algo_config`."""
    from renderers import AutoRendererConfig, RendererConfig

    class PrimeRLComposerAlgoConfig(base, ComposerAlgoConfig):  # type: ignore[misc, valid-type]
        """The composer algorithm (composer-prime): RLVR outcome advantage + targeted hint self-distillation +
        trace-replay credit, for `composer_prime.loss.composer_loss`."""

        action_loss_type: ClassVar[Literal["rl"]] = "rl"
        algorithm_class: ClassVar[str] = f"{__name__}.ComposerAlgorithm"

        renderer: RendererConfig = AutoRendererConfig()
        """Renderer family for the hint message. The tokenizer is always the live policy's. Defaults to `auto`;
        set it to match a non-auto policy renderer."""

    PrimeRLComposerAlgoConfig.__name__ = PrimeRLComposerAlgoConfig.__qualname__ = "ComposerAlgoConfig"
    return PrimeRLComposerAlgoConfig


def extend_algo_config(module: ModuleType) -> None:
    """Add the composer config to `prime_rl.configs.algorithm.AlgoConfig` (a discriminated union on `type`).

    A PRIME-RL with the algorithm plugin seam (`ALGORITHM_PLUGIN_GROUP`, docs/upstream.md) has already loaded the
    config through composer-prime's `prime_rl.algorithms` entry point: nothing to patch."""
    if getattr(module, "ComposerAlgoConfig", None) is not None or hasattr(module, "ALGORITHM_PLUGIN_GROUP"):
        return
    base = getattr(module, "BaseAlgoConfig", None)
    union = getattr(module, "AlgoConfig", None)
    if base is None or union is None:
        raise seam_moved("prime_rl.configs.algorithm has no BaseAlgoConfig or AlgoConfig")
    args = typing.get_args(union)
    members = typing.get_args(args[0]) if args else ()
    discriminators = [m for m in args[1:] if getattr(m, "discriminator", None) == "type"]
    if typing.get_origin(union) is not Annotated or not members or not discriminators:
        raise seam_moved("AlgoConfig is no longer an Annotated union discriminated on `type`")
    if getattr(sys.modules.get("prime_rl.configs.orchestrator"), "OrchestratorConfig", None) is not None:
        raise seam_moved(
            "PRIME-RL's orchestrator config was imported before the hook ran (the union is already bound); "
            "install composer-prime into PRIME-RL's environment so its .pth loads the hook at start-up"
        )
    config = config_class(base)
    module.ComposerAlgoConfig = config
    union_type = functools.reduce(operator.or_, (*members, config))
    module.AlgoConfig = Annotated[union_type, Field(discriminator="type")]


def register_algorithm(module: ModuleType) -> None:
    """Add `ComposerAlgorithm` to `prime_rl.orchestrator.algo.ALGORITHM_CLASSES`; a PRIME-RL with the plugin seam
    (`plugin_algorithm_class`) imports it from the config's `algorithm_class` instead."""
    if callable(getattr(module, "plugin_algorithm_class", None)):
        return
    classes = getattr(module, "ALGORITHM_CLASSES", None)
    if not isinstance(classes, dict) or not callable(getattr(module, "build_algorithm", None)):
        raise seam_moved("prime_rl.orchestrator.algo has no ALGORITHM_CLASSES dict or build_algorithm")
    if "composer" not in classes:
        classes["composer"] = __getattr__("ComposerAlgorithm")


def __getattr__(name: str) -> Any:
    """`ComposerAlgorithm` is built on first use: it subclasses PRIME-RL's `Algorithm` (orchestrator only)."""
    if name != "ComposerAlgorithm":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cls = globals()["ComposerAlgorithm"] = _algorithm_class()
    return cls


def _algorithm_class() -> type:
    from prime_rl.orchestrator.algo.base import Algorithm, iter_trainable_traces
    from prime_rl.orchestrator.algo.routing import assign_advantages

    class ComposerAlgorithm(Algorithm):
        """Outcome + replay advantages per group, hint references per episode (composer_prime.algorithm)."""

        action_loss_type = "rl"

        def __init__(self, config: Any, policy_pool: Any):
            super().__init__(config, policy_pool)
            self.config = config
            self.renderer: Any = None
            self.scoring = HintScoring(config, self.render, lambda ids: self.policy_pool.score(ids))

        async def setup(self) -> None:
            if not self.config.hints.enabled:
                return
            from renderers.base import create_renderer, load_tokenizer

            self.renderer = create_renderer(load_tokenizer(self.policy_pool.model_name), self.config.renderer)

        def render(self, role: str, text: str) -> list[int]:
            return self.renderer.render_ids([{"role": role, "content": text}], add_generation_prompt=False)

        async def score_episode(self, episode: Any) -> None:
            """Starts the episode's hint scoring and returns: the consumer takes the next episode meanwhile."""
            if not self.config.hints.enabled:
                return
            assert self.renderer is not None, "renderer not built: Algorithm.setup() must run first"
            self.scoring.start(str(episode.id), [trace for _, trace in iter_trainable_traces([episode])])

        async def score_group(self, episodes: list[Any]) -> None:
            """The group's hint references are written before its samples are compiled (right after this hook)."""
            await self.scoring.wait(str(episode.id) for episode in episodes)
            traces = [trace for _, trace in iter_trainable_traces(episodes)]
            if self.config.hints.enabled and self.config.hints.siblings:
                await self.scoring.siblings(traces, check_rewards(traces))
            for trace, values in zip(traces, group_advantages(traces, self.config), strict=True):
                assign_advantages(trace, values)

    ComposerAlgorithm.__module__, ComposerAlgorithm.__qualname__ = __name__, "ComposerAlgorithm"
    return ComposerAlgorithm
