"""`local.reference_code`: what of a shared env the agent must not read, found on real folders."""

from __future__ import annotations

from pathlib import Path

from swe_gym.local import reference_code


def _touch(path: Path, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_checkout_and_its_installed_copies_but_no_dependency(tmp_path: Path) -> None:
    venv = tmp_path / "envs" / "toy__calc" / "0.1-abc"
    for rel in (
        "src/calc/__init__.py",
        "src/helpers.py",
        "src/setup.py",
        "src/docs/conf.py",
        "src/src/inner/__init__.py",
    ):
        _touch(venv / rel)
    site = venv / "lib" / "python3.11" / "site-packages"
    for rel in ("calc/__init__.py", "helpers.py", "inner/__init__.py", "setup.py", "requests/__init__.py", "docs/x"):
        _touch(site / rel)
    assert reference_code(venv) == [venv / "src", site / "calc", site / "helpers.py", site / "inner"]


def test_an_env_still_being_built_has_nothing_to_hide(tmp_path: Path) -> None:
    assert reference_code(tmp_path / "envs" / "toy__calc" / "0.1-abc") == []
