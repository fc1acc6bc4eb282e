"""A fresh folder on the host outside the temporary folder, where production keeps what the jail must cover: the
jail mounts a fresh `/tmp`, so anything under it is out of the jail's sight by accident and a test of a cover there
proves nothing."""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path

import pytest


def outside_tmp() -> Path:
    """A fresh folder outside the temporary folder (the home's cache, or else this checkout); skips the test when
    there is none. The caller removes it."""
    tmp = Path(tempfile.gettempdir()).resolve()
    for base in (Path.home() / ".cache", Path(__file__).resolve().parents[2]):
        resolved = base.resolve()
        if resolved != tmp and tmp not in resolved.parents and Path("/tmp") not in resolved.parents:
            root = base / f"composer-prime-test-{secrets.token_hex(4)}"
            root.mkdir(parents=True)
            return root
    pytest.skip("no folder outside the temporary folder to hold the boxes")
