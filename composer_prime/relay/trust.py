"""What a client accepts from the relay, beyond a valid signature: nothing older than it serves, nothing out of order.

A signature proves the origin published a version once; it does not prove the version is current. Whoever answers as
the relay could replay an earlier, validly signed publication: the weights of a step before the trainer restarted, or
a chain of deltas that skips or reorders versions. So a client also checks, before it fetches a body shard:

- **of its run**: the manifest's signed `run_id` is the client's `run_id` (one key may sign several runs);
- **not replayed**: the version it is asked to serve has a `sequence` no smaller than that of the version it last
  handed to vLLM (`served.json` in its store, kept across restarts). The origin's sequences grow with every
  publication whatever its step, so the orchestrator's requests only ever move it forward: a resumed trainer
  re-broadcasts an older step, which the origin publishes again with a newer sequence. A publication older than
  what was served is `Stale`: the client waits (up to `wait_for_version_s`) for the origin to publish the step
  again, then refuses it as a replay;
- **in order**: each version of a plan applies to the one before it: the delta's `base_step` and `base_digest` name
  that version's step and checkpoint digest, and both step and sequence increase along the chain.

Refusals raise `Refused` before any byte of the refused version is fetched; the client keeps serving what it has.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from composer_prime.atomic import write_atomic
from composer_prime.relay.manifest import Manifest, Section
from composer_prime.relay.transport import Refused

SERVED_FILE = "served.json"


@dataclass(frozen=True)
class Served:
    """The version this host last handed to vLLM."""

    run_id: str
    step: int
    sequence: int
    digest: str


def load_served(store: Path) -> Served | None:
    try:
        record = json.loads((store / SERVED_FILE).read_text())
        return Served(str(record["run_id"]), int(record["step"]), int(record["sequence"]), str(record["digest"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        # A damaged record must not reopen the door to replays: refuse to guess, say how to reset it.
        raise Refused(
            f"{store / SERVED_FILE} is unreadable ({err}); it records the newest version this host served. Delete it "
            "only if you know which weights vLLM holds: every signed version is accepted again until the next update"
        ) from None


def save_served(store: Path, served: Served) -> None:
    write_atomic(store / SERVED_FILE, json.dumps(served.__dict__).encode())


class Stale(Refused):
    """A publication older than the one this host served: a replay, or a step the origin is about to publish again."""


def check_run(path: str, run_id: str, expected: str) -> None:
    if run_id != expected:
        raise Refused(
            f"{path} is signed for run_id {run_id!r}, not this client's run_id = {expected!r}: a version of another "
            "run (same signing key); give the client the run_id its origin was started with"
        )


def check_not_replayed(step: int, sequence: int, served: Served | None) -> None:
    """Refuse to serve a publication older than the one vLLM got last."""
    if served is not None and sequence < served.sequence:
        raise Stale(
            f"v{step} (sequence {sequence}) is older than step_{served.step} (sequence {served.sequence}), which "
            "this host already served: a replayed publication. Kept the weights loaded now"
        )


def check_chain(step: int, chain: list[tuple[Manifest, Section]]) -> None:
    """`chain` (oldest first, as planned) must end at `step` and each delta must apply to the version before it."""
    if not chain or chain[-1][0].step != step:
        raise Refused(f"the plan for step {step} does not end at v{step}")
    for (before, _), (after, section) in zip(chain, chain[1:], strict=False):
        if (
            section.kind != "delta"
            or section.base_step != before.step
            or section.base_digest != before.digest
            or not (before.step < after.step and before.sequence < after.sequence)
        ):
            raise Refused(
                f"v{after.step} (sequence {after.sequence}) does not follow v{before.step} (sequence "
                f"{before.sequence}): its delta applies to step {section.base_step} with digest "
                f"{(section.base_digest or '')[:12]}..., the relay's v{before.step} has {before.digest[:12]}...: "
                "versions out of order, or from different publications"
            )
    for manifest, section in chain:
        if section.kind == "delta" and (section.base_step is None or section.base_step >= manifest.step):
            raise Refused(f"v{manifest.step}'s delta applies to a later step ({section.base_step}): out of order")
