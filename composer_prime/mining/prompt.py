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


def call_sites(files: dict[str, str], feature: Feature, limit: int = MAX_CALL_SITES) -> list[str]:
    """`path:line: text` for lines of visible Python files that mention the feature's name as a whole word."""
    name = feature.name
    pattern = re.compile(rf"(?<![\w.]){re.escape(name)}\b|\.{re.escape(name)}\b")
    sites = []
    for path in sorted(files):
        if not path.endswith(".py"):
            continue
        for number, line in enumerate(files[path].splitlines(), start=1):
            if pattern.search(line):
                sites.append(f"{path}:{number}: {line.strip()}")
                if len(sites) >= limit:
                    return sites
    return sites


def _block(signature: str, docstring: str | None) -> str:
    doc = textwrap.indent(f'"""{docstring}"""', "    ") if docstring else "    ..."
    return f"{signature}:\n{doc}"


def render(feature: Feature, sites: list[str], import_sites: list[str]) -> str:
    """The prompt for one task."""
    kind = _KIND_WORDS[feature.kind]
    if feature.kind == "module":
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
