"""What every launch of PRIME-RL's `rl` on this machine shares: the checkout it installs, the CPU launch config, the
cache of patched trees and venvs with its lock, and the ports PRIME-RL binds beyond the ones it is given."""

from __future__ import annotations

import os
from pathlib import Path

CPU_TOML = "tomls/cpu-smoke.toml"
"""PRIME-RL's launch config for this machine's CPUs, relative to the checkout (the smoke's; the realtime CPU demo
takes its CPU settings)."""
CACHE_LOCK = ".lock"
"""Held in the cache while a run builds or reads the venvs, the patched copy and the prepared inputs."""
ENV_SERVER_PORTS = 4
"""Ports kept free from the env servers' base port on (one env server per source, the smoke's config has two)."""


def project_root() -> Path | None:
    """The composer-prime checkout this package runs from (the venvs install it), if any."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / CPU_TOML).is_file() else None


def default_cache() -> Path:
    """Where the patched PRIME-RL copies and the venvs are kept between runs (the smoke's and the realtime demo's)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "composer-prime" / "smoke"
