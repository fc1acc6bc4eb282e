"""Fixtures shared by the end-to-end modules that run Feature Deletion rollouts on the mined shop repository."""

from __future__ import annotations

import os
import sys

import pytest

from tests.support.featdel_repo import mined_shop


@pytest.fixture(scope="module")
def tasks_file(tmp_path_factory):
    """The shop repository's mined tasks file (mined once per session, read-only)."""
    return mined_shop(tmp_path_factory)[1]


@pytest.fixture
def python_on_path(monkeypatch):
    """The tasks' test command is `python -m pytest`: in the box, `python` must be this interpreter (it has pytest)."""
    monkeypatch.setenv("PATH", os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
