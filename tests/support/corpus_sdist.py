"""A tiny package as a PyPI sdist in a find-links folder, for the `mine-corpus` tests.

`write_shop_sdist(folder)` packs the Feature Deletion tests' `shop` package (`featdel_repo.FILES`) as
`shop-<version>.tar.gz` with the `PKG-INFO` an sdist carries (license expression, a `test` extra naming pytest) and a
setuptools `pyproject.toml`, so pip downloads it from `folder` like any PyPI release.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from tests.support.featdel_repo import FILES

LICENSE = "MIT"
PKG_INFO = """\
Metadata-Version: 2.4
Name: shop
Version: {version}
Summary: A tiny shop used to test Feature Deletion mining
License-Expression: {license}
Provides-Extra: test
Requires-Dist: pytest>=7; extra == "test"
"""
PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "shop"
version = "{version}"
license = "{license}"

[project.optional-dependencies]
test = ["pytest>=7"]
"""


def write_shop_sdist(folder: Path, version: str = "0.1.0", extra: dict[str, str] | None = None) -> Path:
    """Write `shop-<version>.tar.gz` into `folder` (with the `extra` files, path -> text); its path."""
    files = {
        **FILES,
        **(extra or {}),
        "PKG-INFO": PKG_INFO.format(version=version, license=LICENSE),
        "pyproject.toml": PYPROJECT.format(version=version, license=LICENSE),
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"shop-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"shop-{version}/{name}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return path
