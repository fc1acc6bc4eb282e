"""The task statement: what was removed, well enough to rebuild it, without the implementation.

It names the feature and its file, gives the signature(s) and docstring(s) (for a class or module, of every public
member), lists the places in the visible tree that use it, and the files whose imports of it were removed. It says
how the work is judged (hidden tests), never which lines were there. Pure: the miner passes what it found.
"""

from __future__ import annotations

import re
import textwrap

from composer_prime.mining.features import Feature, module_name

MAX_CALL_SITES = 15

_KIND_WORDS = {"function": "function", "method": "method", "class": "class", "module": "module"}


def refers_to(path: str, text: str, feature: Feature) -> bool:
    """Whether a file reaches the feature by reference: its own file; for a method, a file naming the class; else a
    file naming the feature's module."""
    if path == feature.path:
        return True
    if feature.kind == "method":
        return re.search(rf"\b{re.escape(feature.qualname.split('.')[0])}\b", text) is not None
    module = module_name(feature.path)
    return module in text or re.search(rf"\b{re.escape(module.rsplit('.', 1)[-1])}\b", text) is not None


def call_sites(
    files: dict[str, str], feature: Feature, limit: int = MAX_CALL_SITES, exclude: frozenset[str] = frozenset()
) -> list[str]:
    """`path:line: text` for lines of visible Python files (not in `exclude`: files holding a partial copy of the
    deleted code) that use the feature: a bare use of a function, class or module name anywhere; an attribute use
    (`x.name`) only in a file that refers to the feature (`refers_to`), so `LRI.clear` is not hinted by every
    `.clear()`. Definitions of other things with the same name are not uses."""
    name = re.escape(feature.name)
    bare = re.compile(rf"(?<![\w.]){name}\b")
    dotted = re.compile(rf"\.{name}\b")
    definition = re.compile(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b")
    sites = []
    for path in sorted(files):
        if not path.endswith(".py") or path in exclude:
            continue
        text = files[path]
        related = refers_to(path, text, feature)
        for number, line in enumerate(text.splitlines(), start=1):
            if definition.search(line):
                continue
            uses_bare = feature.kind != "method" and bare.search(line)
            if uses_bare or (related and (dotted.search(line) or bare.search(line))):
                sites.append(f"{path}:{number}: {line.strip()}")
                if len(sites) >= limit:
                    return sites
    return sites


def _block(signature: str, docstring: str | None) -> str:
    doc = textwrap.indent(f'"""{docstring}"""', "    ") if docstring else "    ..."
    return f"{signature}:\n{doc}"


def render(feature: Feature, sites: list[str], import_sites: list[str], stub: bool = False) -> str:
    """The prompt for one task; `stub`: the feature's name was kept and its body raises `NotImplementedError`."""
    kind = _KIND_WORDS[feature.kind]
    if stub and feature.kind == "class":
        what = (
            f"The class `{feature.qualname}` in `{feature.path}` has been emptied: its methods raise "
            "`NotImplementedError` and its other members were removed."
        )
    elif stub:
        what = (
            f"The body of the {kind} `{feature.qualname}` in `{feature.path}` has been removed: it raises "
            "`NotImplementedError`."
        )
    elif feature.kind == "module":
        what = f"The module `{module_name(feature.path)}` (file `{feature.path}`) has been deleted."
    elif feature.kind == "method":
        cls = feature.qualname.split(".")[0]
        what = f"The method `{feature.name}` of class `{cls}` in `{feature.path}` has been deleted."
    else:
        what = f"The {kind} `{feature.qualname}` in `{feature.path}` has been deleted."
    if feature.kind == "module":
        header = f'"""{feature.docstring}"""' if feature.docstring else f"# module {module_name(feature.path)}"
    else:
        header = _block(feature.signature, feature.docstring)
    members = [_block(signature, doc) for signature, doc in feature.members]
    if feature.kind == "class":
        members = [textwrap.indent(member, "    ") for member in members]
    parts = [
        f"{what} Re-implement it so that the code base works as it did before.",
        "",
        "## What to rebuild",
        "",
        "```python",
        "\n\n".join([header, *members]),
        "```",
    ]
    if sites:
        parts += ["", "## Where it is used", ""] + [f"- `{site}`" for site in sites]
    if import_sites:
        parts += [
            "",
            f"Imports of `{feature.name}` were removed from: " + ", ".join(f"`{path}`" for path in import_sites) + ".",
        ]
    parts += [
        "",
        "## How it is judged",
        "",
        (
            "Hidden tests exercise this feature; the repository's other tests must keep passing. Do not edit test "
            "files: they are restored before grading. Run the visible tests with `python -m pytest`."
        ),
    ]
    return "\n".join(parts)
