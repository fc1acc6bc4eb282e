"""Which candidate features make tasks worth training on, and in what order.

A feature is covered by the tests whose traced calls enter it (`covering_tests`). Candidates are tried best first
(`rank`): public API (no `_private` folder, module, class or name on its path), with a docstring, covered by at
least three tests. `why_kept` records those reasons on the row. `top_packages` names the repository's import
packages, for finding installed copies of them.
"""

from __future__ import annotations

from composer_prime.mining.features import Feature, is_source_file


def _covers(feature: Feature, path: str, qualname: str) -> bool:
    if path != feature.path:
        return False
    return not feature.qualname or qualname == feature.qualname or qualname.startswith(feature.qualname + ".")


def top_packages(texts: dict[str, str]) -> set[str]:
    """Import names of the repository's top-level packages (`src/` layout aware)."""
    names = set()
    for path in texts:
        parts = path.split("/")
        if parts[0] == "src":
            parts = parts[1:]
        if len(parts) >= 2 and parts[-1] == "__init__.py" and len(parts) == 2 and is_source_file(path):
            names.add(parts[0])
    return names


def is_public(feature: Feature) -> bool:
    """Neither the feature nor any folder or module on its path is `_private` (`__init__.py` aside)."""
    parts = [p.removesuffix(".py") for p in feature.path.split("/")]
    names = [*parts, *feature.qualname.split(".")] if feature.qualname else parts
    return not any(name.startswith("_") and not name.startswith("__") for name in names if name)


def rank(feature: Feature, covered: int) -> tuple[bool, bool, bool]:
    """Sort key, best first: public API, with a docstring, covered by at least three tests."""
    return (not is_public(feature), feature.docstring is None, covered < 3)


def why_kept(feature: Feature, covered: int) -> str:
    """The reasons a task is worth training on, recorded on the row."""
    api = "public API" if is_public(feature) else "private"
    doc = "documented" if feature.docstring else "no docstring"
    return f"{api}, {doc}, {covered} covering test(s), {feature.body_lines}-line body"


def covering_tests(feature: Feature, calls: dict[str, list[tuple[str, str]]]) -> set[str]:
    """The tests whose traced calls enter the feature (a class: any of its methods; a module: any function)."""
    return {test for test, called in calls.items() if any(_covers(feature, p, q) for p, q in called)}
