"""The package imports cheaply and the `composer-prime` command answers --help and --version."""

from __future__ import annotations

import subprocess
import sys

import composer_prime


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def test_import_does_not_pull_torch_or_verifiers():
    code = "import composer_prime, composer_prime.cli, sys; print(sorted({'torch', 'verifiers'} & set(sys.modules)))"
    result = run(sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_cli_help_lists_usage():
    result = run(sys.executable, "-m", "composer_prime", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: composer-prime" in result.stdout


def test_cli_version_prints_the_installed_version():
    result = run(sys.executable, "-m", "composer_prime", "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"composer-prime {composer_prime.__version__}"
    assert composer_prime.__version__ != "0.0.0+unknown", "the test environment must install the package"


def test_console_script_is_installed():
    from pathlib import Path

    script = Path(sys.executable).with_name("composer-prime")
    assert script.exists(), f"{script} missing: install the package (pip install -e .)"
    result = run(str(script), "--help")
    assert result.returncode == 0 and "composer-prime" in result.stdout


def test_every_subcommand_has_help():
    from composer_prime.cli import SUBCOMMANDS

    for name in SUBCOMMANDS:
        result = run(sys.executable, "-m", "composer_prime", name, "--help")
        assert result.returncode == 0, f"{name} --help failed: {result.stderr}"


def test_bare_command_is_a_usage_error():
    result = run(sys.executable, "-m", "composer_prime")
    assert result.returncode == 2
    assert "a command is required" in result.stderr and "usage: composer-prime" in result.stderr
