"""The `composer-prime` command.

Each subcommand lives in its own module, named in `SUBCOMMANDS` and imported only when that subcommand runs, so
`composer-prime --help` stays instant. A subcommand module exposes `main(argv, prog) -> int`. Options come from the
subcommand's pydantic config through `parse_config` (`pydantic_config`, the CLI library PRIME-RL and verifiers use):
every field is a kebab-case flag with its docstring as help, `@ file.toml` loads a config file, and a bad value is
reported by one formatter, naming the flag, the value and the fix, with exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import TypeVar

from composer_prime import __version__

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "mine-features": ("composer_prime.mining.command", "mine Feature Deletion tasks from a tested repository"),
    "mine-corpus": (
        "composer_prime.corpus.command",
        "mine many packages into a corpus, each in its own environment image",
    ),
    "corpus-dataset": (
        "composer_prime.corpus.dataset_command",
        "build a mined Feature Deletion corpus into a Hugging Face dataset (parquet + card)",
    ),
    "relay": (
        "composer_prime.relay.command",
        "weight relay: delta-compressed SHARDCAST origin and inference proxy",
    ),
    "realtime": (
        "composer_prime.realtime.cycle.command",
        "real-time RL: train on live session logs, ship a new policy every T minutes",
    ),
    "smoke": ("composer_prime.smoke.command", "the whole Composer recipe end to end at toy scale on this CPU machine"),
}

T = TypeVar("T")


class UsageError(Exception):
    """Bad command-line input; the message names the option, the value and the fix."""


def parse_config(cls: type[T], argv: list[str], prog: str, description: str | None = None) -> T:
    """Parse `argv` (flags and `@ file.toml`) into `cls`; raises UsageError with a one-screen message on bad input."""
    from pydantic import ValidationError
    from pydantic_config import cli
    from pydantic_config.cli import ConfigFileError

    try:
        return cli(cls, args=argv, prog=prog, description=description)
    except (ConfigFileError, ValidationError) as err:
        text = str(err).replace("Failed to validate config: ", "").replace("Value error, ", "")
        raise UsageError(f"{prog}: {text}\nRun `{prog} --help` for every option.") from None


def build_parser() -> argparse.ArgumentParser:
    commands = "\n".join(f"  {name:<16} {help_text}" for name, (_, help_text) in SUBCOMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="composer-prime",
        description="Composer recipe for PRIME-RL: task mining, environments, weight relay.",
        epilog=f"commands:\n{commands}\n\n`composer-prime COMMAND --help` lists a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"composer-prime {__version__}")
    parser.add_argument("command", nargs="?", choices=list(SUBCOMMANDS), metavar="COMMAND", help="the command to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        print("\ncomposer-prime: a command is required (see the list above)", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[args.command][0])
    prog = f"composer-prime {args.command}"
    try:
        return int(module.main(list(args.args), prog) or 0)
    except UsageError as err:
        print(err, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # `python -m composer_prime.cli`: the subcommands raise `composer_prime.cli.UsageError`,
    from composer_prime.cli import main as package_main  # not this `__main__` copy's class, so run the package's `main`

    sys.exit(package_main())
