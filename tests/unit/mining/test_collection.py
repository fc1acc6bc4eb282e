"""Tests where packages keep them (issue 43, line 2): the root pytest.ini the miner adds so that pytest collects
unittest-style test files, and only when the repository's configuration and pytest's defaults find none."""

from __future__ import annotations

import configparser

from composer_prime.mining.collection import guarded_mains, widened_config
from composer_prime.mining.features import is_source_file, is_test_file


def _ini(data: bytes) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(data.decode())
    return dict(parser["pytest"])


def test_a_root_tests_py_gets_a_pytest_ini_that_collects_it():
    widened = widened_config({"nameparser/parser.py": b"", "tests.py": b"import unittest\n"})
    assert widened is not None
    data, why = widened
    assert _ini(data) == {"python_files": "test_*.py *_test.py tests.py test*.py *tests.py"}
    assert "unittest-style ones find 1 (tests.py)" in why


def test_the_repositorys_own_settings_are_carried_into_the_ini():
    setup_cfg = b"[metadata]\nname = x\n\n[tool:pytest]\nmarkers =\n    slow: slow\naddopts = -q\n"
    data, why = widened_config({"pkg/a.py": b"", "pkg/tests/testparse.py": b"", "setup.cfg": setup_cfg}) or (b"", "")
    assert _ini(data) == {
        "markers": "slow: slow",
        "addopts": "-q",
        "python_files": "test_*.py *_test.py tests.py test*.py *tests.py",
    }
    assert "setup.cfg's pytest settings" in why


def test_nothing_changes_where_pytest_already_finds_the_tests():
    assert widened_config({"pkg/a.py": b"", "tests/test_a.py": b"", "tests.py": b""}) is None
    own = b"[pytest]\npython_files = check_*.py\n"
    assert widened_config({"pkg/a.py": b"", "tests.py": b"", "pytest.ini": own}) is None
    assert widened_config({"pkg/a.py": b"", "pkg/b.py": b""}) is None


def test_unittest_names_are_test_files_not_sources():
    for path in ("tests.py", "pytimeparse/testtimeparse.py", "pkg/footests.py", "test.py"):
        assert is_test_file(path) and not is_source_file(path), path
    assert is_source_file("pkg/contest_rules.py") and not is_test_file("pkg/contest_rules.py")


def test_a_module_level_unittest_main_is_guarded_and_nothing_else_changes():
    source = (
        b"import unittest\nfrom unittest import main as run\n\n\nclass T(unittest.TestCase):\n"
        b"    def test_a(self):\n        unittest.main()  # inside a test: left alone\n\n\n"
        b"run(\n    verbosity=2,\n)\nunittest.main()\n"
    )
    changed, why = guarded_mains({"test/test_t.py": source, "pkg/mod.py": b"import unittest\nunittest.main()\n"}) or (
        {},
        "",
    )
    assert list(changed) == ["test/test_t.py"] and "test/test_t.py call unittest.main()" in why
    assert changed["test/test_t.py"] == (
        b"import unittest\nfrom unittest import main as run\n\n\nclass T(unittest.TestCase):\n"
        b"    def test_a(self):\n        unittest.main()  # inside a test: left alone\n\n\n"
        b'if __name__ == "__main__":\n    run(\n        verbosity=2,\n    )\n'
        b'if __name__ == "__main__":\n    unittest.main()\n'
    )
    guarded = b'import unittest\n\nif __name__ == "__main__":\n    unittest.main()\n'
    assert guarded_mains({"tests.py": guarded, "test_bad.py": b"unittest.main(\n"}) is None
