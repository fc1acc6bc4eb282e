"""Pure pieces of the Feature Deletion miner: outcomes, discovery, deletion, patches, task rows, scrubbing."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest

from composer_prime.mining.deletion import CannotDelete, delete_feature
from composer_prime.mining.features import discover, is_protected_file, is_source_file, module_name
from composer_prime.mining.patch import unified_patch
from composer_prime.mining.prompt import call_sites, render
from composer_prime.mining.record import load_rows
from composer_prime.mining.snapshot import is_scrubbed, leaks
from composer_prime.pytest_outcomes import parse_outcomes, pass_fraction
from tests.support.featdel_repo import FILES


def _feature(files: dict[str, str], path: str, qualname: str):
    return next(f for f in discover(path, files[path]) if f.qualname == qualname)


def test_parse_outcomes_reads_rA_summary():
    output = (
        "tests/test_a.py ..F\n"
        "=========================== short test summary info ============================\n"
        "PASSED tests/test_a.py::test_one\n"
        "PASSED tests/test_a.py::TestX::test_param[1-2]\n"
        "\x1b[31mFAILED\x1b[0m tests/test_a.py::test_two - AssertionError: assert 1 == 2\n"
        "ERROR tests/test_b.py - ImportError: cannot import name 'f'\n"
        "SKIPPED [1] tests/test_c.py:4: no network\n"
        "XFAIL tests/test_c.py::test_known - flaky upstream\n"
        "PASSED tests/test_a.py::test_teardown_error\n"
        "ERROR tests/test_a.py::test_teardown_error - RuntimeError"
    )
    outcomes = parse_outcomes(output)
    assert outcomes == {
        "tests/test_a.py::test_one": "PASSED",
        "tests/test_a.py::TestX::test_param[1-2]": "PASSED",
        "tests/test_a.py::test_two": "FAILED",
        "tests/test_b.py": "ERROR",
        "tests/test_c.py::test_known": "XFAIL",
        "tests/test_a.py::test_teardown_error": "ERROR",  # the worse of its two reports
    }
    # a test that never ran (its module failed to import) counts as not passing
    assert pass_fraction(outcomes, ["tests/test_a.py::test_one", "tests/test_b.py::test_gone"]) == 0.5
    assert pass_fraction(outcomes, []) == 1.0


def test_file_roles():
    assert is_source_file("shop/cart.py") and module_name("shop/cart.py") == "shop.cart"
    assert module_name("src/shop/__init__.py") == "shop"
    assert not is_source_file("tests/test_cart.py") and is_protected_file("tests/test_cart.py")
    assert is_protected_file("pytest.ini") and is_protected_file("pkg/conftest.py")
    assert is_protected_file("tests/data/expected.json") and not is_protected_file("docs/index.md")
    assert not is_source_file("setup.py") and not is_protected_file("shop/cart.py")


def test_discover_lists_functions_classes_methods_and_modules():
    features = {f.key: f for f in discover("shop/cart.py", FILES["shop/cart.py"])}
    assert set(features) == {
        "shop/cart.py::Cart",
        "shop/cart.py::Cart.add",
        "shop/cart.py::Cart.total",
        "shop/cart.py::Cart.count",
        "shop/cart.py",
    }  # __init__ is a dunder: deleting it is not a feature
    total = features["shop/cart.py::Cart.total"]
    assert total.kind == "method"
    assert total.signature == "def total(self, discount_percent: float=0.0) -> float"
    assert total.docstring == "Sum of price times quantity over all lines, less an optional discount."
    assert [sig for sig, _ in features["shop/cart.py::Cart"].members][:2] == [
        "def __init__(self) -> None",
        "def add(self, name: str, price: float, quantity: int=1) -> None",
    ]
    assert discover("broken.py", "def f(:\n") == []
    assert discover("stub.py", "def f():\n    '''Doc.'''\n    raise NotImplementedError\n") == []


def test_delete_function_fixes_imports_and_all_across_modules():
    deletion = delete_feature(FILES, _feature(FILES, "shop/pricing.py", "apply_discount"))
    assert set(deletion.changed) == {"shop/pricing.py", "shop/cart.py", "shop/__init__.py"}
    assert "def apply_discount" not in deletion.changed["shop/pricing.py"]
    assert "def format_price" in deletion.changed["shop/pricing.py"]
    assert "import apply_discount" not in deletion.changed["shop/cart.py"]
    init = ast.parse(deletion.changed["shop/__init__.py"])
    assert "from shop.pricing import format_price" in deletion.changed["shop/__init__.py"]
    exported = next(n for n in init.body if isinstance(n, ast.Assign))
    assert ast.literal_eval(exported.value) == ["Cart", "format_price"]
    assert deletion.removed.startswith("def apply_discount(amount: float, percent: float) -> float:")
    for text in deletion.changed.values():
        ast.parse(text)
    # test files are never edited: their failing imports are what makes FAIL_TO_PASS
    assert not any(path.startswith("tests/") for path in deletion.changed)


def test_delete_relative_import_and_reexport_chain():
    files = {
        "pkg/__init__.py": "from .core import helper\n",
        "pkg/core.py": "def helper(x):\n    return x * 2\n\n\ndef other():\n    return 1\n",
        "pkg/user.py": "from pkg import helper, other_name\n\n\ndef use():\n    return helper(2)\n",
    }
    files["pkg/core.py"] += "\n\nother_name = 3\n"
    deletion = delete_feature(files, _feature(files, "pkg/core.py", "helper"))
    assert deletion.changed["pkg/__init__.py"].strip() == ""
    assert deletion.changed["pkg/user.py"].startswith("from pkg import other_name\n")


def test_delete_last_method_leaves_pass():
    files = {"m.py": "class A:\n    '''Doc.'''\n\n    def only(self):\n        return 41 + 1\n"}
    deletion = delete_feature(files, _feature(files, "m.py", "A.only"))
    namespace: dict = {}
    exec(deletion.changed["m.py"], namespace)  # noqa: S102 - the edited module itself must still define the class
    assert not hasattr(namespace["A"], "only")


def test_module_imported_by_sources_is_not_deletable():
    with pytest.raises(CannotDelete, match="shop/cart.py"):
        delete_feature(
            FILES, next(f for f in discover("shop/pricing.py", FILES["shop/pricing.py"]) if f.kind == "module")
        )
    textutil = next(f for f in discover("shop/textutil.py", FILES["shop/textutil.py"]) if f.kind == "module")
    assert delete_feature(FILES, textutil).changed == {"shop/textutil.py": None}


def test_gold_patch_applies_with_git(tmp_path: Path):
    files = dict(FILES)
    files["notes.txt"] = "no trailing newline"
    deletion = delete_feature(files, _feature(files, "shop/pricing.py", "apply_discount"))
    deleted = {**files, **{p: t for p, t in deletion.changed.items() if t is not None}}
    deleted["notes.txt"] = "no trailing newline, edited"
    for path, text in deleted.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    changed = [*deletion.changed, "notes.txt"]
    patch = unified_patch({p: deleted[p] for p in changed}, {p: files[p] for p in changed})
    patch += unified_patch({}, {"shop/new_module.py": "X = 1\n"})
    (tmp_path / "gold.patch").write_text(patch)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True, timeout=30)
    subprocess.run(["git", "apply", "gold.patch"], cwd=tmp_path, check=True, timeout=30, capture_output=True)
    for path in changed:
        assert (tmp_path / path).read_text() == files[path]
    assert (tmp_path / "shop/new_module.py").read_text() == "X = 1\n"


def test_prompt_describes_without_implementation():
    feature = _feature(FILES, "shop/pricing.py", "apply_discount")
    deletion = delete_feature(FILES, feature)
    visible = {**FILES, **deletion.changed}
    visible = {p: t for p, t in visible.items() if not p.startswith("tests/")}
    sites = call_sites(visible, feature)
    assert sites == ["shop/cart.py:20: return apply_discount(subtotal, discount_percent)"]
    prompt = render(feature, sites, ["shop/__init__.py", "shop/cart.py"])
    assert "def apply_discount(amount: float, percent: float) -> float" in prompt
    assert "rounded to cents" in prompt and "shop/cart.py:20" in prompt and "`shop/__init__.py`" in prompt
    assert "reduced = amount" not in prompt and "round(reduced, 2)" not in prompt


def test_scrub_rules_and_leak_search(tmp_path: Path):
    for path in [
        "a/__pycache__/x.cpython-311.pyc",
        "x.pyc",
        ".mypy_cache/3.11/x.json",
        ".pytest_cache/v/x",
        ".ruff_cache/x",
        "build/lib/x.py",
        "pkg.egg-info/PKG-INFO",
        ".git/config",
        "dist/x.whl",
    ]:
        assert is_scrubbed(path), path
    assert not is_scrubbed("shop/builder.py") and not is_scrubbed("docs/build.md")
    (tmp_path / "copy.py").write_text("class C:\n    def f(self):\n        x = compute()\n        return x + 1\n")
    (tmp_path / "other.py").write_text("y = 2\n")
    assert leaks(tmp_path, "def f(self):\n    x = compute()\n    return x + 1\n") == ["copy.py"]


def test_load_rows_names_row_and_field_and_keeps_the_rest(tmp_path: Path):
    good = {
        "task_id": "r:m.py::f",
        "repo": "r",
        "repo_fingerprint": "ab",
        "prompt": "Rebuild f.",
        "base": "t.jsonl.ab.tar.gz",
        "feature": {"kind": "function", "path": "m.py", "qualname": "f"},
        "test_files": ["tests/test_m.py"],
        "held_out": ["tests/test_m.py"],
        "fail_to_pass": ["tests/test_m.py::test_f"],
        "pass_to_pass": ["tests/test_n.py::test_g"],
        "gold_patch": "diff --git a/m.py b/m.py\n",
        "changes": {"m.py": [[1, 1, ["x = 1\n"]]]},
        "test_cmd": ["python", "-m", "pytest"],
        "test_timeout_s": 60.0,
    }
    missing = {k: v for k, v in good.items() if k != "gold_patch"}
    wrong = {**good, "task_id": "r:m.py::g", "fail_to_pass": "tests/test_m.py::test_f"}
    escaping = {**good, "test_files": ["../outside.py"], "held_out": []}
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        "\n".join([json.dumps(good), json.dumps(missing), "{not json", json.dumps(wrong), "[1]", json.dumps(escaping)])
        + "\n"
    )
    tasks, errors = load_rows(path)
    assert [task.task_id for task in tasks] == ["r:m.py::f"]
    assert errors[0] == "row 2 (task_id 'r:m.py::f'): field 'gold_patch' is missing"
    assert errors[1].startswith("row 3: not valid JSON")
    assert errors[2].startswith("row 4 (task_id 'r:m.py::g'): field 'fail_to_pass' = 'tests/test_m.py::test_f'")
    assert "valid list" in errors[2]
    assert errors[3] == "row 5: expected a JSON object, got list"
    assert "path '../outside.py' is not a relative path inside the repository" in errors[4]


def test_copy_index_measures_near_copies_and_call_sites_resolve_by_reference():
    from composer_prime.mining.copies import NEAR_COPY, CopyIndex

    body = FILES["shop/cart.py"].split("class Cart:", 1)[1]
    edited = body.replace("if quantity <= 0:", "if quantity < 1:")
    index = CopyIndex({"vendor/cart.py": "class Cart:" + edited, "shop/textutil.py": FILES["shop/textutil.py"]})
    shares = index.overlaps(body, {})
    assert shares["vendor/cart.py"] >= NEAR_COPY and "shop/textutil.py" not in shares
    assert index.overlaps(body, {"vendor/cart.py": None}) == {}  # a file the deletion removed holds nothing
    assert index.overlaps("return x\n", {}) == {}  # too short to judge by shingles
    feature = _feature(FILES, "shop/cart.py", "Cart.count")
    files = {
        "shop/cart.py": FILES["shop/cart.py"],
        "shop/report.py": "from shop.cart import Cart\n\n\ndef n(cart: Cart):\n    return cart.count()\n",
        "shop/other.py": "def words(text):\n    return text.count(' ')\n",
    }
    assert call_sites(files, feature) == ["shop/report.py:5: return cart.count()"]
    assert call_sites(files, feature, exclude=frozenset({"shop/report.py"})) == []


def test_ranking_puts_documented_public_api_with_several_tests_first():
    from composer_prime.mining.ranking import is_public, rank, why_kept

    files = {
        "pkg/_impl.py": 'def helper(x):\n    """Help."""\n    y = x + 1\n    return y\n',
        "pkg/api.py": 'def run(x):\n    """Run."""\n    y = x * 2\n    return y\n\n\ndef bare(x):\n    return x\n',
    }
    run, bare = _feature(files, "pkg/api.py", "run"), _feature(files, "pkg/api.py", "bare")
    helper = _feature(files, "pkg/_impl.py", "helper")
    assert is_public(run) and is_public(bare) and not is_public(helper)
    ordered = sorted([(helper, 5), (bare, 5), (run, 1), (run, 4)], key=lambda fc: rank(*fc))
    assert ordered == [(run, 4), (run, 1), (bare, 5), (helper, 5)]
    assert why_kept(run, 4) == "public API, documented, 4 covering test(s), 2-line body"


def test_deletion_edits_the_source_text_and_keeps_its_formatting():
    """more-itertools' `__all__` came back as one 1,692-character line; only the deleted name's line may change."""
    init = (
        '"""Pkg."""\n\nfrom pkg.core import (  # the public names\n    first,\n    last,\n    only,\n)\n\n'
        '__all__ = [\n    "first",\n    "last",  # the end\n    "only",\n]\n'
    )
    core = (
        'def first(xs):\n    """First."""\n    return xs[0]\n\n\n'
        'def last(xs):\n    """Last."""\n    return xs[-1]\n\n\n'
        'def only(xs):\n    """Only."""\n    (x,) = xs\n    return x\n'
    )
    files = {"pkg/__init__.py": init, "pkg/core.py": core}
    deletion = delete_feature(files, _feature(files, "pkg/core.py", "last"))
    assert deletion.changed["pkg/__init__.py"] == init.replace("    last,\n", "").replace(
        '    "last",  # the end\n', ""
    )
    patch = unified_patch(before=deletion.changed, after={p: files[p] for p in deletion.changed})
    added = [line for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")]
    removed = [line for line in patch.splitlines() if line.startswith("-") and not line.startswith("---")]
    assert removed == []
    assert added == [
        "+    last,",
        '+    "last",  # the end',
        "+",
        "+",
        "+def last(xs):",
        '+    """Last."""',
        "+    return xs[-1]",
    ]
