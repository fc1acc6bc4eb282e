"""The `composer-prime` command.

Each subcommand lives in its own module, named in `SUBCOMMANDS`. A subcommand module exposes
`configure(parser: argparse.ArgumentParser) -> None` (argparse only, no heavy imports at module level) and
`run(args: argparse.Namespace) -> int`. Heavy imports happen inside `run`, so `--help` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from composer_prime import __version__

# name -> (module, one-line help). Modules are imported when the parser is built, so they must import cheaply.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "mine-features": ("composer_prime.mining.command", "mine Feature Deletion tasks from a tested repository"),
    "swe-gym-prepare": ("composer_prime.swe_gym_prepare", "build swe-gym local-mode snapshots and venvs ahead of a run"),
    "relay": (
        "composer_prime.broadcast.command",
        "weight relay: delta-compressed SHARDCAST origin and inference-side proxy",
    ),
    "smoke": ("composer_prime.smoke.command", "the whole Composer recipe end to end at toy scale on this CPU machine"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="composer-prime",
        description="Composer recipe for PRIME-RL: task mining, environments, weight relay.",
    )
    parser.add_argument("--version", action="version", version=f"composer-prime {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.configure(sub_parser)
        sub_parser.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run = getattr(args, "_run", None)
    if run is None:
        parser.print_help()
        return 0
    try:
        return int(run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
