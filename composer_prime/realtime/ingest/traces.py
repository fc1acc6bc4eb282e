"""A logged session as a verifiers v1 `Trace`: the replay half of the PRIME-RL seam (docs/realtime.md).

PRIME-RL trains what its orchestrator holds as `vf.Trace`s: `trace_to_samples` turns each branch into a
`TrainingSample` whose `logprobs` (the trainer's `inference_logprobs`) come from the sampled nodes. The replay harness
(`replay.py`) fills its rollout's trace with a session's nodes instead of calling a model, so a live session reaches
PRIME-RL's trainer with its serving-time logprobs, as one of PRIME-RL's own rollouts would.

Each branch becomes a chain of nodes, one per segment: a context segment is an unsampled node (mask False), a sampled
segment an assistant node with the serving logprobs (verifiers' compact layout: one per sampled token). Segments
carry tokens, not message boundaries, so node messages are placeholders; the session's id, version and signals go to
`trace.info["realtime"]`.
"""

from __future__ import annotations

from itertools import groupby
from typing import Any

from composer_prime.realtime.ingest.join import Episode
from composer_prime.realtime.records import Branch, Segment, SessionRecord


def episode_branches(episode: Episode) -> list[Branch]:
    """An episode's samples back as branches of segments (runs of equal mask): the session's token streams."""
    branches = []
    for sample in episode.samples:
        segments, i = [], 0
        for sampled, run in groupby(sample.mask):
            n = len(list(run))
            ids = sample.token_ids[i : i + n]
            logprobs = sample.logprobs[i : i + n] if sampled else None
            segments.append(Segment(token_ids=ids, sampled=sampled, logprobs=logprobs))
            i += n
        branches.append(Branch(segments=segments))
    return branches


def branch_nodes(branches: list[Branch], timestamp: float) -> list[Any]:
    """The `vf.MessageNode`s of `branches`: one root-to-leaf chain per branch, one node per segment."""
    import verifiers.v1 as vf

    nodes: list[vf.MessageNode] = []
    for branch in branches:
        parent: int | None = None
        for segment in branch.segments:
            role = "assistant" if segment.sampled else "user"
            nodes.append(
                vf.MessageNode(
                    parent=parent,
                    message={"role": role, "content": ""},
                    sampled=segment.sampled,
                    timestamp=timestamp,
                    token_ids=list(segment.token_ids),
                    mask=[segment.sampled] * len(segment.token_ids),
                    logprobs=list(segment.logprobs or []) if segment.sampled else [],
                )
            )
            parent = len(nodes) - 1
    return nodes


def session_trace(session: SessionRecord, reward: float | None = None, info: dict[str, Any] | None = None) -> Any:
    """A session as a stand-alone trace (what the replay harness writes into its rollout's trace)."""
    import verifiers.v1 as vf

    realtime = {
        "session_id": session.session_id,
        "policy_version": session.policy_version,
        "user": session.user,
        "group": session.group,
        "messages": session.messages,
        **(info or {}),
    }
    trace = vf.Trace(
        agent=vf.AgentInfo(config=vf.AgentConfig()),
        task=vf.TraceTask(type="realtime-session", data={}, key=session.session_id, hash=session.session_id),
        nodes=branch_nodes(session.branches, session.ended_at),
        info={"realtime": realtime},
    )
    if reward is not None:
        trace.rewards["signals"] = vf.Reward(score=reward)  # the reward model's value (`reward.py`)
    return trace
