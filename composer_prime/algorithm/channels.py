"""Which of the three channels a launch config trains, per train source, and the configs that are refused.

A composer TOML names a recipe; what it trains depends on more than `[orchestrator.algo]`: the replay channel needs
teachers configured on the source's environment (the `composer-teachers` judge, or the composer environments'
`teacher` table that plugs it), the hint channel needs its groups to reach the trainer (a curriculum admission gate
can reject them) and a trainer loss that reads the reference stream (`composer_loss`). A config in which a channel
the algorithm turns on could not train is refused when PRIME-RL parses it (the import hook runs `refusals` in
`OrchestratorConfig` and `RLConfig` validation), with the key and the fix, instead of training a different recipe.

Works on plain dicts: PRIME-RL's parsed config (`model_dump()`) or a merged TOML (`tests/unit`, docs' channel audit),
so it runs without PRIME-RL. Defaults of the composer blocks come from `ComposerAlgoConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass

from composer_prime.algorithm.config import ComposerAlgoConfig
from composer_prime.algorithm.credit import HINT_MARK

TEACHERS_JUDGE = "composer-teachers"
REALTIME_TASKSET = "realtime-sessions"
LOSS_PATH = "composer_prime.loss.composer_loss"


@dataclass(frozen=True)
class SourceChannels:
    """What one train source trains."""

    source: str
    algo: str
    """`[orchestrator.algo] type` in effect for this source (its own `algo` table, else the top one)."""
    outcome: bool
    """RLVR outcome advantage (composer with `outcome.coef > 0`, or PRIME-RL's own group-relative algorithms)."""
    hints: bool
    """Targeted hint self-distillation (composer with hints on)."""
    replay: bool
    """Trace-replay credit: composer with replay on and at least one teacher on the source's environment."""
    teachers: int
    """Teachers configured on the source's environment."""
    demonstration: str | None = None
    """`opsd`: the key its demonstration is read from."""


def teachers_of(source: dict) -> int:
    """Teachers scoring this source's traces: a `composer-teachers` judge, or a composer environment's `teacher` table."""
    task = ((source.get("env") or {}).get("taskset") or {}).get("task") or {}
    for judge in task.get("judges") or []:
        if isinstance(judge, dict) and judge.get("id") == TEACHERS_JUDGE:
            return len(judge.get("teachers") or [])
    teacher = task.get("teacher")
    return len(teacher.get("teachers") or []) if isinstance(teacher, dict) else 0


def _algo(source: dict, top: dict) -> dict:
    return source.get("algo") or top or {"type": "grpo"}


def source_channels(orchestrator: dict) -> list[SourceChannels]:
    """Per train source of `orchestrator` (a dict of `[orchestrator]`), the channels it trains."""
    top = orchestrator.get("algo") or {"type": "grpo"}
    out = []
    for source in ((orchestrator.get("train") or {}).get("source")) or []:
        algo = _algo(source, top)
        kind = algo.get("type", "grpo")
        teachers = teachers_of(source)
        name = source.get("name", "?")
        if kind == "composer":
            config = ComposerAlgoConfig.model_validate({k: v for k, v in algo.items() if k in _COMPOSER_KEYS})
            out.append(
                SourceChannels(
                    name,
                    kind,
                    outcome=config.outcome.coef > 0,
                    hints=config.hints.enabled,
                    replay=config.replay.enabled and teachers > 0,
                    teachers=teachers,
                )
            )
        elif kind == "opsd":
            out.append(SourceChannels(name, kind, False, False, False, teachers, algo.get("demo_key", "answer")))
        else:
            out.append(SourceChannels(name, kind, outcome=kind != "sft", hints=False, replay=False, teachers=teachers))
    return out


_COMPOSER_KEYS = set(ComposerAlgoConfig.model_fields)


def refusals(orchestrator: dict) -> list[str]:
    """Why the `[orchestrator]` dict would not train the channels its composer algorithm turns on; empty if it would."""
    problems = []
    top = orchestrator.get("algo") or {"type": "grpo"}
    sources = ((orchestrator.get("train") or {}).get("source")) or []
    for i, (source, channels) in enumerate(zip(sources, source_channels(orchestrator), strict=True)):
        if channels.algo != "composer":
            continue
        algo = _algo(source, top)
        key = f"orchestrator.train.source[{i}] ({channels.source!r})"
        replay_on = (algo.get("replay") or {}).get("enabled", True)
        if ((source.get("env") or {}).get("taskset") or {}).get("id") == REALTIME_TASKSET and (
            replay_on or channels.hints
        ):
            problems.append(
                f"{key}: the {REALTIME_TASKSET} source replays logged sessions as token streams whose nodes carry "
                "placeholder messages (session-log version 1 does not align messages with tokens), so no hint target "
                "or teacher step can be read from them. Set [orchestrator.algo.hints] enabled = false and "
                "[orchestrator.algo.replay] enabled = false on this source (docs/realtime.md, What remains)."
            )
            continue
        if replay_on and channels.teachers == 0:
            problems.append(
                f"{key}: [orchestrator.algo.replay] enabled = true, but no teacher scores this source's traces "
                f"(no `{TEACHERS_JUDGE}` judge and no teachers in [orchestrator.train.source.env.taskset.task.teacher]), "
                "so the replay channel would train nothing. Add the teacher table (docs/teachers.md; tomls/*.toml "
                "configure three) or turn the channel off with [orchestrator.algo.replay] enabled = false "
                "(recipes/no-replay.toml)."
            )
        if not channels.hints:
            continue
        config = ComposerAlgoConfig.model_validate({k: v for k, v in algo.items() if k in _COMPOSER_KEYS})
        if config.hints.kinds == ["teacher_hint"] and channels.teachers == 0:
            problems.append(
                f"{key}: [orchestrator.algo.hints] kinds = ['teacher_hint'] but no teacher is configured, so no step "
                "can become a hint target. Add a teacher table (docs/teachers.md) or add evidence kinds "
                "(edit_then_failure, tool_error)."
            )
        gates = (source.get("curriculum") or {}).get("gates") or {}
        for name, gate in gates.items():
            low, high = float(gate.get("reject_min", 0.0)), float(gate.get("reject_max", 0.0))
            if low <= HINT_MARK <= high:
                problems.append(
                    f"{key}: curriculum gate {name!r} rejects groups whose advantages all lie in "
                    f"[{low}, {high}], which holds every group of equal rewards, the groups whose hint tokens are the "
                    "only signal (composer_prime/algorithm/credit.py, HINT_MARK). Set "
                    f"[orchestrator.train.source.curriculum.gates.{name}] reject_max below {HINT_MARK} (the default "
                    "reject_min = reject_max = 0.0 admits them) or turn hints off ([orchestrator.algo.hints] "
                    "enabled = false)."
                )
    return problems


def loss_refusals(orchestrator: dict, loss: dict) -> list[str]:
    """The hint channel needs a trainer loss that reads the reference stream (`[trainer.loss]`, the `rl` launcher)."""
    problems = []
    if any(c.hints for c in source_channels(orchestrator)):
        path = loss.get("import_path") if loss.get("type") == "custom" else None
        if path != LOSS_PATH:
            problems.append(
                f"trainer.loss: the composer algorithm's hint channel is on, but [trainer.loss] is "
                f"type = {loss.get('type')!r}, import_path = {path!r}, which ignores the hint reference stream. Set "
                f'[trainer.loss] type = "custom", import_path = "{LOSS_PATH}", or turn hints off '
                "([orchestrator.algo.hints] enabled = false)."
            )
    return problems


def teachers_read(source: dict, top: dict) -> bool:
    """Whether anything reads the verdicts of `source`'s teachers: the composer algorithm's replay channel, its hint
    channel with `teacher_hint` targets, or `trace.reward` through a teacher judge of non-zero weight."""
    algo = _algo(source, top)
    if algo.get("type", "grpo") == "composer":
        config = ComposerAlgoConfig.model_validate({k: v for k, v in algo.items() if k in _COMPOSER_KEYS})
        if config.replay.enabled or (config.hints.enabled and "teacher_hint" in config.hints.kinds):
            return True
    # a `teacher` table plugs the judge at weight 0 (`TeacherJudgeConfig`); only a judge entry can weigh the reward
    task = ((source.get("env") or {}).get("taskset") or {}).get("task") or {}
    judges = [j for j in task.get("judges") or [] if isinstance(j, dict) and j.get("id") == TEACHERS_JUDGE]
    return any(float(j.get("weight") or 0.0) != 0.0 for j in judges)


def unread_teachers(orchestrator: dict) -> list[int]:
    """Indices of the train sources whose teachers are configured but read by nothing (a baseline, or a composer
    recipe with replay and teacher hints off): their teacher tables are dropped at parse time, so a recipe that turns
    a channel off pays no teacher query for it."""
    top = orchestrator.get("algo") or {"type": "grpo"}
    sources = ((orchestrator.get("train") or {}).get("source")) or []
    return [i for i, s in enumerate(sources) if teachers_of(s) > 0 and not teachers_read(s, top)]


def channel_table(rows: list[tuple[str, list[SourceChannels]]]) -> str:
    """A markdown table: launch (TOML + recipe) x source -> live channels (docs/prime-rl-integration.md)."""
    lines = ["| launch | source | algo | outcome | hints | replay (teachers) |", "|---|---|---|---|---|---|"]
    for launch, sources in rows:
        for s in sources:
            algo = f"opsd on `{s.demonstration}`" if s.algo == "opsd" else s.algo
            replay = f"live ({s.teachers})" if s.replay else "off"
            lines.append(
                f"| {launch} | {s.source} | {algo} | {'live' if s.outcome else 'off'} | "
                f"{'live' if s.hints else 'off'} | {replay} |"
            )
    return "\n".join(lines)
