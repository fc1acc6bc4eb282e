"""The PRIME-RL side of the `composer` algorithm: its config class in `AlgoConfig` and `ComposerAlgorithm`.

Imported only by `hook.py`, from inside a PRIME-RL process, right after the PRIME-RL module it patches has
executed. Everything the algorithm computes lives in the pure core (`credit.py`, `hints.py`); this adapter wires it
to PRIME-RL's hooks: `score_episode` starts prefill-scoring hint targets through the live policy pool
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
from composer_prime.algorithm.credit import group_advantages
from composer_prime.algorithm.scoring import HintScoring

PINNED_COMMIT = "559b447"


class SeamMoved(RuntimeError):
    """A PRIME-RL seam the composer hook patches is not where commit 559b447 has it."""


def _moved(what: str) -> SeamMoved:
    return SeamMoved(
        f"composer-prime cannot register the `composer` algorithm: {what}. composer-prime supports PRIME-RL at commit "
        f"{PINNED_COMMIT}; check out that commit (git -C prime-rl checkout {PINNED_COMMIT}) or update "
        "composer_prime/algorithm/plugin.py to the new seam (docs/prime-rl-integration.md)."
    )


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
        raise _moved("prime_rl.configs.algorithm has no BaseAlgoConfig or AlgoConfig")
    args = typing.get_args(union)
    members = typing.get_args(args[0]) if args else ()
    discriminators = [m for m in args[1:] if getattr(m, "discriminator", None) == "type"]
    if typing.get_origin(union) is not Annotated or not members or not discriminators:
        raise _moved("AlgoConfig is no longer an Annotated union discriminated on `type`")
    if getattr(sys.modules.get("prime_rl.configs.orchestrator"), "OrchestratorConfig", None) is not None:
        raise _moved(
            "PRIME-RL's orchestrator config was imported before the hook ran (the union is already bound); "
            "install composer-prime into PRIME-RL's environment so its .pth loads the hook at start-up"
        )
    config = config_class(base)
    module.ComposerAlgoConfig = config
    union_type = functools.reduce(operator.or_, (*members, config))
    module.AlgoConfig = Annotated[union_type, Field(discriminator="type")]


def check_loss_kwargs(module: ModuleType) -> None:
    """Validate `[trainer.loss.kwargs]` of composer_loss when PRIME-RL parses the config, not at the first loss call.

    `prime_rl.configs.trainer` defines `LossConfig` and uses it in `TrainerConfig` in the same module, so the union
    cannot be rebound before use: the custom member is replaced by a subclass that checks the kwargs, and
    `TrainerConfig` is rebuilt before any other module (the `rl` launcher's `RLConfig`) builds on it."""
    custom = getattr(module, "CustomLossConfig", None)
    union = getattr(module, "LossConfig", None)
    trainer = getattr(module, "TrainerConfig", None)
    if custom is None or union is None or trainer is None or "loss" not in getattr(trainer, "model_fields", {}):
        raise _moved("prime_rl.configs.trainer has no CustomLossConfig, LossConfig or TrainerConfig.loss")
    if getattr(module, "_composer_checked", False):
        return
    args = typing.get_args(union)
    members = typing.get_args(args[0]) if args else ()
    field = trainer.model_fields["loss"]
    if custom not in members or set(typing.get_args(field.annotation)) != set(members):
        raise _moved("TrainerConfig.loss is no longer the LossConfig union holding CustomLossConfig")
    from pydantic import model_validator

    from composer_prime.loss_config import LOSS_IMPORT_PATH, parse_loss_kwargs

    class CheckedCustomLossConfig(custom):  # type: ignore[misc, valid-type]
        @model_validator(mode="after")
        def _composer_kwargs(self):  # type: ignore[no-untyped-def]
            if self.import_path == LOSS_IMPORT_PATH:
                parse_loss_kwargs(self.kwargs)  # raises ValueError naming the key, the value and the fix
            return self

    CheckedCustomLossConfig.__name__ = CheckedCustomLossConfig.__qualname__ = "CustomLossConfig"
    checked = tuple(CheckedCustomLossConfig if m is custom else m for m in members)
    union_type = functools.reduce(operator.or_, checked)
    module.LossConfig = Annotated[union_type, *args[1:]]
    field.annotation = union_type  # the discriminator stays on the field
    trainer.model_rebuild(force=True)
    module._composer_checked = True


def let_train_sources_wait(module: ModuleType) -> None:
    """`prime_rl.orchestrator.train_source`: `TrainSource.next_task` returns None (the dispatcher's "source is empty",
    tried again on its next pass) while the tasksets it may draw from raise `TaskNotReady` (`realtime/readiness.py`)."""
    from composer_prime.realtime.readiness import patch_train_source

    patch_train_source(module)


class ChannelsRefused(ValueError):
    """A launch config in which a channel the composer algorithm turns on could not train (`channels.refusals`)."""


def _with_check(module: ModuleType, name: str, check: Any) -> None:
    """Rebind `module.<name>` to a subclass whose after-validator raises `check(config)`'s problems, if any.

    Runs right after the module executed, before any other PRIME-RL module imports the name."""
    cls = getattr(module, name, None)
    if cls is None or not hasattr(cls, "model_fields"):
        raise _moved(f"{module.__name__} has no pydantic {name}")
    if getattr(cls, "_composer_channels", False):
        return
    from pydantic import model_validator

    class Checked(cls):  # type: ignore[misc, valid-type]
        _composer_channels: ClassVar[bool] = True

        @model_validator(mode="after")
        def _composer_channels_live(self):  # type: ignore[no-untyped-def]
            problems = check(self)
            if problems:
                raise ChannelsRefused("; ".join(problems))
            return self

    Checked.__name__ = Checked.__qualname__ = name
    Checked.__module__ = cls.__module__
    Checked.__doc__ = cls.__doc__
    setattr(module, name, Checked)


def _composer_in_use(config: Any) -> bool:
    algos = [config.algo, *(s.algo for s in config.train.source)]
    return any(getattr(a, "type", None) == "composer" for a in algos if a is not None)


def check_orchestrator_channels(module: ModuleType) -> None:
    """`OrchestratorConfig` refuses a composer config whose replay or hint channel could not train (`channels.py`)."""
    from composer_prime.algorithm.channels import refusals

    _with_check(
        module,
        "OrchestratorConfig",
        lambda config: refusals(config.model_dump(mode="json")) if _composer_in_use(config) else [],
    )


def check_loss_channel(module: ModuleType) -> None:
    """`RLConfig` refuses a composer hint channel with a trainer loss that ignores the reference stream."""
    from composer_prime.algorithm.channels import loss_refusals

    def check(config: Any) -> list[str]:
        if not _composer_in_use(config.orchestrator):
            return []
        return loss_refusals(config.orchestrator.model_dump(mode="json"), config.trainer.loss.model_dump(mode="json"))

    _with_check(module, "RLConfig", check)


def register_algorithm(module: ModuleType) -> None:
    """Add `ComposerAlgorithm` to `prime_rl.orchestrator.algo.ALGORITHM_CLASSES`; a PRIME-RL with the plugin seam
    (`plugin_algorithm_class`) imports it from the config's `algorithm_class` instead."""
    if callable(getattr(module, "plugin_algorithm_class", None)):
        return
    classes = getattr(module, "ALGORITHM_CLASSES", None)
    if not isinstance(classes, dict) or not callable(getattr(module, "build_algorithm", None)):
        raise _moved("prime_rl.orchestrator.algo has no ALGORITHM_CLASSES dict or build_algorithm")
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
            for trace, values in zip(traces, group_advantages(traces, self.config), strict=True):
                assign_advantages(trace, values)

    ComposerAlgorithm.__module__, ComposerAlgorithm.__qualname__ = __name__, "ComposerAlgorithm"
    return ComposerAlgorithm
