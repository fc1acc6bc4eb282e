"""`composer-prime mine-features`: mine Feature Deletion tasks from a tested repository."""

from __future__ import annotations

import sys


def main(argv: list[str], prog: str) -> int:
    from composer_prime.cli import parse_config
    from composer_prime.mining.config import MineConfig, check_inputs

    config = parse_config(MineConfig, argv, prog, description="Mine Feature Deletion tasks from a tested repository.")
    try:
        check_inputs(config)  # before the miner's heavy imports: bad input is refused at once
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    from composer_prime.mining.miner import Miner, MiningError, MiningInputError  # heavy: after --help and parsing

    try:
        tasks = Miner(config).run()
    except MiningInputError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except MiningError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    return 0 if tasks else 1
