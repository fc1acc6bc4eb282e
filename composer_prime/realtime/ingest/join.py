"""Sessions ready to train -> episodes: scrubbed, rewarded, aged, and credited against a baseline.

An `Episode` is what the trainer consumes: one training sample per branch (token ids, the sampled-token mask, the
serving-time logprobs over the whole sequence with 0.0 on context tokens, as PRIME-RL's `TrainingSample` carries
them), the session's reward, its age in trainer steps, and its advantage.

Credit is Dr. GRPO's (the project's outcome channel): reward minus the mean reward of the session's baseline group,
with no division by the standard deviation and no length normalisation. Live sessions are not sampled in groups of
the same prompt, so the group is the `group` field the product sets (a prompt cluster, a repository) when at least
`min_group` sessions of the batch share it, else the whole batch of the cycle.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from composer_prime.realtime.ingest.spool import Ready
from composer_prime.realtime.ingest.staleness import StalenessConfig, Steps, classify
from composer_prime.realtime.monitors.dynamic import DynamicCheck
from composer_prime.realtime.monitors.dynamic import check as check_workspace
from composer_prime.realtime.monitors.pii import Scrubber
from composer_prime.realtime.monitors.reward import RewardModelConfig, session_reward
from composer_prime.realtime.records import SessionRecord


class EpisodeSample(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token_ids: list[int]
    mask: list[bool]
    logprobs: list[float]


class Episode(BaseModel):
    """One trainable session."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    user: str
    group: str
    policy_version: int
    age: int
    """Trainer steps between the weights that served the session and the trainer's (`staleness.Steps`)."""
    reward: float
    signals: list[str]
    """The signal kinds joined (for reports and monitors)."""
    importance_weighted: bool = False
    """True: the advantage is scaled by the sequence-level importance weight at train time (`staleness`)."""
    advantage: float = 0.0
    sampled_tokens: int
    samples: list[EpisodeSample]
    edited_paths: list[str] = Field(default_factory=list)
    """Paths the session's tool calls wrote (for monitors)."""
    disabled_tests: bool = False
    """The session's edits skipped, deleted or emptied tests (`monitors.edits_disable_tests`)."""


def samples_of(session: SessionRecord) -> list[EpisodeSample]:
    out = []
    for branch in session.branches:
        ids: list[int] = []
        mask: list[bool] = []
        logprobs: list[float] = []
        for segment in branch.segments:
            ids.extend(segment.token_ids)
            mask.extend([segment.sampled] * len(segment.token_ids))
            logprobs.extend(segment.logprobs if segment.sampled else [0.0] * len(segment.token_ids))
        # Built from a validated SessionRecord: the types hold (a bundle file is validated when it is read back).
        out.append(EpisodeSample.model_construct(token_ids=ids, mask=mask, logprobs=logprobs))
    return out


def build_episodes(
    ready: list[Ready],
    steps: Steps,
    reward: RewardModelConfig,
    staleness: StalenessConfig,
    scrub: Scrubber,
    dynamic: DynamicCheck | None = None,
) -> tuple[list[Episode], Counter]:
    """Episodes of the sessions in `ready` for the trainer at `steps` (each through `scrub` first, aged in trainer
    steps), and the counts of what was left out. With `dynamic` (repositories set), a session that names its
    workspace, trains above the lowest reward and passes the static reading is also run against its repository's
    original tests (`monitors.dynamic`; counted `dynamic_<status>`)."""
    from composer_prime.realtime.monitors.tampering import edit_facts

    counts: Counter = Counter()
    episodes = []
    for item in ready:
        session, why = scrub(item.session)
        if session is None:
            counts[str(why).split(":", 1)[0]] += 1
            continue
        age = steps.age(session.policy_version)
        verdict = classify(age, staleness)
        if verdict == "future_version":
            counts["future_version"] += 1
            continue
        if verdict == "drop":
            counts["stale_dropped"] += 1
            continue
        value = session_reward(item.signals, reward)
        if value is None:
            counts["no_signal"] += 1
            continue
        counts["stale_weighted" if verdict == "weight" else "fresh"] += 1
        try:
            paths, disabled = edit_facts(session.messages)
        except Exception:  # noqa: BLE001 - a session the detector cannot read must never stop the ingest
            # Flagged, not trusted: a pausing monitor quarantines it when rewarded; a penalised one still trains.
            paths, disabled = [], True
            counts["monitor_unreadable"] += 1
        if dynamic and dynamic.repositories and session.workspace and value > -1.0 and not disabled:
            verdict = check_workspace(session.workspace, dynamic)
            counts[f"dynamic_{verdict.status}"] += 1
            disabled = verdict.flagged
        episodes.append(
            Episode(
                session_id=session.session_id,
                user=session.user,
                group=session.group,
                policy_version=session.policy_version,
                age=age,
                reward=value,
                signals=sorted({s.signal.type for s in item.signals}),
                importance_weighted=verdict == "weight",
                sampled_tokens=session.sampled_tokens(),
                samples=samples_of(session),
                edited_paths=paths,
                disabled_tests=disabled,
            )
        )
    return episodes, counts


def assign_advantages(episodes: list[Episode], min_group: int = 2) -> None:
    """Reward minus the baseline: the mean of the session's group when it has `min_group` members, else the batch."""
    if not episodes:
        return
    batch_mean = sum(e.reward for e in episodes) / len(episodes)
    groups: dict[str, list[Episode]] = defaultdict(list)
    for e in episodes:
        groups[e.group].append(e)
    for name, members in groups.items():
        own = name != "" and len(members) >= min_group
        baseline = sum(e.reward for e in members) / len(members) if own else batch_mean
        for e in members:
            e.advantage = e.reward - baseline


def cap_share(episodes: list[Any], key: str, share: float) -> tuple[list[Any], int]:
    """At most `share` of the episodes from one `user` or `group` (`key`): the oldest-read kept, the rest dropped,
    until every value holds at most `share` of what is kept (at least one episode each). An empty value (no user or
    group logged) is no one's and is never capped. Returns (kept, dropped)."""
    if share >= 1.0:
        return episodes, 0
    kept = list(episodes)
    while True:
        cap = max(1, int(share * len(kept)))
        seen: Counter = Counter()
        trimmed = []
        for e in kept:
            seen[getattr(e, key)] += 1
            if seen[getattr(e, key)] <= cap or getattr(e, key) == "":
                trimmed.append(e)
        if len(trimmed) == len(kept):
            return kept, len(episodes) - len(kept)
        kept = trimmed


def cap_shares(episodes: list[Any], user: float, group: float) -> tuple[list[Any], Counter]:
    """Both caps, again and again until neither drops anything: a repository cap's drops shrink what is kept and can
    put a user over theirs (and the other way round). Returns (kept, `user_capped` / `group_capped` counts)."""
    kept, dropped = list(episodes), Counter()
    while True:
        before = len(kept)
        for key, share in (("user", user), ("group", group)):
            kept, n = cap_share(kept, key, share)
            dropped[f"{key}_capped"] += n
        if len(kept) == before:
            return kept, dropped
