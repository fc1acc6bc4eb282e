"""A package's tests, looked for before an image is built (issue 43, lines 2-4): test files by pytest's and
unittest's names, an sdist without tests falling back to its repository at the release's tag (a real local git
repository named by `Project-URL`), the test imports the metadata does not declare, and the refusal that says its fix."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from composer_prime.corpus import sources, testsuite
from composer_prime.corpus.package import PackageFailed, _release_repository


def _write(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, timeout=60)


def _released_repo(root: Path, tag: str) -> Path:
    """A git repository whose tag `tag` holds the package and its tests; a later commit drops the tests."""
    repo = _write(root / "upstream", {"slug/__init__.py": "def slug(x):\n    return x\n", "test_slug.py": "X = 1\n"})
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "add", ".")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "release")
    _git(repo, "tag", tag)
    return repo


def _sdist(root: Path, urls: list[str]) -> Path:
    pkg_info = "Metadata-Version: 2.1\nName: slug\nVersion: 1.2.0\n" + "".join(f"Project-URL: {u}\n" for u in urls)
    return _write(
        root / "sdist" / "slug-1.2.0", {"PKG-INFO": pkg_info, "slug/__init__.py": "def slug(x):\n    return x\n"}
    )


def test_test_files_by_pytest_and_unittest_names(tmp_path: Path) -> None:
    tree = _write(
        tmp_path,
        {"pkg/a.py": "", "tests.py": "", "pkg/testparse.py": "", "t/x_test.py": "", ".tox/test_no.py": "", "b.py": ""},
    )
    assert testsuite.test_files(tree) == ["pkg/testparse.py", "t/x_test.py", "tests.py"]


def test_repository_urls_by_label_then_home_page(tmp_path: Path) -> None:
    sdist = _sdist(
        tmp_path,
        [
            "Documentation, https://slug.readthedocs.io",
            "Homepage, https://github.com/ada/slug-home",
            "Source, https://github.com/ada/slug.git",
        ],
    )
    assert testsuite.repository_urls(sdist) == ["https://github.com/ada/slug", "https://github.com/ada/slug-home"]


def test_an_sdist_without_tests_is_mined_from_its_repository_at_the_release_tag(tmp_path: Path) -> None:
    upstream = _released_repo(tmp_path, "v1.2.0")
    sdist = _sdist(tmp_path, [f"Source, file://{upstream}"])
    lines: list[str] = []
    job = {"spec": "slug==1.2.0", "name": "slug", "version": "1.2.0"}
    tree = _release_repository(job, sdist, tmp_path / "scratch", lines.append)
    assert tree.name == "slug-1.2.0" and (tree / "test_slug.py").is_file()
    assert (
        lines[-1]
        == f"fetch: the sdist ships no test files; mining file://{upstream}@v1.2.0 instead (its metadata's repository)"
    )


def test_no_tests_anywhere_is_refused_with_the_fix(tmp_path: Path) -> None:
    upstream = _released_repo(tmp_path, "other-tag")
    job = {"spec": "slug==1.2.0", "name": "slug", "version": "1.2.0"}
    with pytest.raises(PackageFailed) as refused:
        _release_repository(job, _sdist(tmp_path, [f"Source, file://{upstream}"]), tmp_path / "s1", lambda line: None)
    message = str(refused.value)
    assert message.startswith("slug==1.2.0: the sdist ships no test files (test_*.py, *_test.py, tests.py")
    assert f"tried file://{upstream}@v1.2.0, file://{upstream}@1.2.0" in message
    assert "a [[repos]] entry in corpus.toml with its url and ref = the release's tag" in message
    with pytest.raises(PackageFailed, match="its metadata names no repository"):
        _release_repository(job, _sdist(tmp_path / "bare", []), tmp_path / "s2", lambda line: None)


def test_missing_imports_are_the_undeclared_ones(tmp_path: Path) -> None:
    tree = _write(
        tmp_path,
        {
            "iso/__init__.py": "",
            "tests/helpers.py": "",
            "tests/test_iso.py": (
                "import os\nimport pytest\nimport hypothesis.strategies as st\nfrom dateutil import tz\n"
                "import pytz\nimport yaml\nfrom iso import parse\nfrom tests import helpers\n"
                "try:\n    import numpy\nexcept ImportError:\n    numpy = None\n"
                "try:\n    import simplejson as json\nexcept (ValueError, ModuleNotFoundError):\n    import json\n"
            ),
        },
    )
    declared = ["PyYAML>=6", "pytz ; python_version < '4'"]
    assert testsuite.missing_imports(tree, declared) == ["hypothesis", "python-dateutil"]


def test_a_fetch_failure_is_a_source_error_the_fallback_steps_over(tmp_path: Path) -> None:
    with pytest.raises(sources.SourceError):
        sources.fetch_git(f"file://{tmp_path}/nowhere", "v1", tmp_path / "f", "x")
