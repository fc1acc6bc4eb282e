"""Launch configs checked when PRIME-RL parses them, not when the first GPU step runs.

Two patches of PRIME-RL's config classes, applied by the import hook (`hook.py`) right after each config module
executed, before any other PRIME-RL module imports the names:

- `check_loss_kwargs` (`prime_rl.configs.trainer`): a `[trainer.loss]` block naming `composer_prime.loss.composer_loss`
  validates its kwargs with `ComposerLossConfig` (torch-free), so a typo fails in the launcher;
- `check_orchestrator_channels` and `check_loss_channel` (`prime_rl.configs.orchestrator`, `prime_rl.configs.rl`):
  `OrchestratorConfig` and `RLConfig` refuse a composer config in which a channel the algorithm turns on could not
  train (`composer_prime.algorithm.channels`, pure logic over the dumped config). `OrchestratorConfig` also unplugs
  the teachers of a train source whose verdicts nothing reads (`channels.unread_teachers`: a baseline, or replay
  and teacher hints off), so a recipe that turns the channels off pays no teacher query: the launcher writes each
  env server's config from the parsed source, without them.
"""

from __future__ import annotations

import functools
import operator
import typing
from types import ModuleType
from typing import Annotated, Any, ClassVar

from composer_prime.seam.errors import seam_moved


def check_loss_kwargs(module: ModuleType) -> None:
    """Validate `[trainer.loss.kwargs]` of composer_loss when PRIME-RL parses the config, not at the first loss call.

    `prime_rl.configs.trainer` defines `LossConfig` and uses it in `TrainerConfig` in the same module, so the union
    cannot be rebound before use: the custom member is replaced by a subclass that checks the kwargs, and
    `TrainerConfig` is rebuilt before any other module (the `rl` launcher's `RLConfig`) builds on it."""
    custom = getattr(module, "CustomLossConfig", None)
    union = getattr(module, "LossConfig", None)
    trainer = getattr(module, "TrainerConfig", None)
    if custom is None or union is None or trainer is None or "loss" not in getattr(trainer, "model_fields", {}):
        raise seam_moved("prime_rl.configs.trainer has no CustomLossConfig, LossConfig or TrainerConfig.loss")
    if getattr(module, "_composer_checked", False):
        return
    args = typing.get_args(union)
    members = typing.get_args(args[0]) if args else ()
    field = trainer.model_fields["loss"]
    if custom not in members or set(typing.get_args(field.annotation)) != set(members):
        raise seam_moved("TrainerConfig.loss is no longer the LossConfig union holding CustomLossConfig")
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


class ChannelsRefused(ValueError):
    """A launch config in which a channel the composer algorithm turns on could not train (`channels.refusals`)."""


def drop_teachers(task: Any) -> None:
    """Unplug the `composer-teachers` judge from a parsed task config (a `TeacherTaskConfig`'s `teacher` table
    first, whose validator would plug it again)."""
    from composer_prime.algorithm.channels import TEACHERS_JUDGE

    def get(obj: Any, name: str) -> Any:
        return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)

    def put(obj: Any, name: str, value: Any) -> None:
        if isinstance(obj, dict):
            obj[name] = value
        else:
            setattr(obj, name, value)

    if get(task, "teacher") is not None:
        put(task, "teacher", None)
    judges = get(task, "judges") or []
    put(task, "judges", [j for j in judges if get(j, "id") != TEACHERS_JUDGE])


def _drop_unread_teachers(config: Any) -> None:
    from composer_prime.algorithm.channels import unread_teachers

    sources = config.train.source
    for i in unread_teachers(config.model_dump(mode="json")):
        taskset = getattr(sources[i].env, "taskset", None)
        task = taskset.get("task") if isinstance(taskset, dict) else getattr(taskset, "task", None)
        if task is not None:
            drop_teachers(task)


def _with_check(module: ModuleType, name: str, check: Any, prepare: Any = None) -> None:
    """Rebind `module.<name>` to a subclass whose after-validator runs `prepare(config)`, then raises
    `check(config)`'s problems, if any.

    Runs right after the module executed, before any other PRIME-RL module imports the name."""
    cls = getattr(module, name, None)
    if cls is None or not hasattr(cls, "model_fields"):
        raise seam_moved(f"{module.__name__} has no pydantic {name}")
    if getattr(cls, "_composer_channels", False):
        return
    from pydantic import model_validator

    class Checked(cls):  # type: ignore[misc, valid-type]
        _composer_channels: ClassVar[bool] = True

        @model_validator(mode="after")
        def _composer_channels_live(self):  # type: ignore[no-untyped-def]
            if prepare is not None:
                prepare(self)
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
    """`OrchestratorConfig` drops the teachers nothing reads and refuses a composer config whose replay or hint channel
    could not train (`channels.py`)."""
    from composer_prime.algorithm.channels import refusals

    _with_check(
        module,
        "OrchestratorConfig",
        lambda config: refusals(config.model_dump(mode="json")) if _composer_in_use(config) else [],
        prepare=_drop_unread_teachers,
    )


def check_loss_channel(module: ModuleType) -> None:
    """`RLConfig` refuses a composer hint channel with a trainer loss that ignores the reference stream."""
    from composer_prime.algorithm.channels import loss_refusals

    def check(config: Any) -> list[str]:
        if not _composer_in_use(config.orchestrator):
            return []
        return loss_refusals(config.orchestrator.model_dump(mode="json"), config.trainer.loss.model_dump(mode="json"))

    _with_check(module, "RLConfig", check)
