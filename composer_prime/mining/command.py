"""`composer-prime mine-features`: mine Feature Deletion tasks from a tested repository."""

from __future__ import annotations

import sys


def main(argv: list[str], prog: str) -> int:
    from composer_prime.cli import parse_config
    from composer_prime.mining.miner import MineConfig, Miner, MiningError

    config = parse_config(MineConfig, argv, prog, description="Mine Feature Deletion tasks from a tested repository.")
    try:
        tasks = Miner(config).run()
    except MiningError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    return 0 if tasks else 1
