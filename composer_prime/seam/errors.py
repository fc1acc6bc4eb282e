"""What every patch of the seam raises when PRIME-RL is not shaped as the pinned commit has it.

Each patch checks the names it touches before touching them; a missing or reshaped one is a `SeamMoved` that names
the pinned commit and the two fixes (check that commit out, or move the patch to the new seam).
"""

from __future__ import annotations

PINNED_COMMIT = "559b447"
"""The PRIME-RL commit every patch in `composer_prime.seam` is written against."""


class SeamMoved(RuntimeError):
    """A PRIME-RL seam composer-prime patches is not where commit 559b447 has it."""


def seam_moved(what: str) -> SeamMoved:
    """The error for a seam that moved: `what` says which name is missing or reshaped."""
    return SeamMoved(
        f"composer-prime cannot patch PRIME-RL: {what}. composer-prime supports PRIME-RL at commit {PINNED_COMMIT}; "
        f"check out that commit (git -C prime-rl checkout {PINNED_COMMIT}) or update composer_prime/seam/ to the new "
        "seam (docs/prime-rl-integration.md)."
    )
