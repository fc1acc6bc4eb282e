"""Whether a package's license lets its source be redistributed in a published Feature Deletion dataset.

A task carries the package's code (its repository-state tarball, its gold patch), so a published dataset may hold
only packages whose license allows redistribution. The license is what the sdist's metadata says, read in the order
packaging tools read it: `License-Expression` (an SPDX expression), else the free-form `License` field, else the
`License ::` trove classifiers. `classify` maps it onto `ALLOWED`, permissive licenses and MPL-2.0 (file-level copyleft
whose files stay under their own license), and says why when it does not:

- an SPDX expression is allowed when it evaluates true with `OR` as either and `AND` as both;
  `WITH <exception>` keeps the base license's verdict only for exceptions that add permissions (`LLVM-exception`);
- a free-form `License` is allowed when it is a known name of an allowed license (`MIT License`, `new BSD`,
  `Apache 2.0`, ...) or, word for word, the MIT license's text under at most a title and copyright lines (setup.py
  files often read LICENSE into it). Any other text, the MIT text with one clause added or changed included (a
  Commons Clause, "except that you may not redistribute it"), is not recognised: other full texts (BSD's many
  wordings, Apache's) are not matched, so such a package is left out until a human adds its name to `NAMES`;
- trove classifiers are allowed when every `License ::` classifier names an allowed license (several classifiers may
  mean "either" or "both"; the stricter reading is taken);
- a list holding a `License` text (or expression) and classifiers (`sources.license_of` records both when a package
  states both) is allowed only when every part is: a `License: MIT` beside a proprietary or GPL classifier is out.

Anything else (a copyleft license, a name not listed here, an empty field) is excluded: a human reads the package's
LICENSE file and, where it allows redistribution, adds the name to `NAMES`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ALLOWED = frozenset(
    {
        "MIT",
        "MIT-0",
        "BSD-2-Clause",
        "BSD-3-Clause",
        "Apache-2.0",
        "ISC",
        "PSF-2.0",
        "Python-2.0",
        "MPL-2.0",
        "Unlicense",
        "0BSD",
        "CC0-1.0",
        "Zlib",
        "BSL-1.0",
        "HPND",
    }
)
"""SPDX ids whose terms allow redistributing the source with its notices."""

PERMISSIVE_EXCEPTIONS = frozenset({"LLVM-exception"})
"""SPDX `WITH` exceptions that only add permissions."""

NAMES: dict[str, str] = {
    "mit": "MIT",
    "mit license": "MIT",
    "the mit license": "MIT",
    "expat": "MIT",
    "mit-0": "MIT-0",
    "bsd": "BSD-3-Clause",
    "bsd license": "BSD-3-Clause",
    "new bsd": "BSD-3-Clause",
    "new bsd license": "BSD-3-Clause",
    "modified bsd": "BSD-3-Clause",
    "modified bsd license": "BSD-3-Clause",
    "bsd-3": "BSD-3-Clause",
    "3-clause bsd": "BSD-3-Clause",
    "bsd 3-clause": "BSD-3-Clause",
    "bsd 3-clause license": "BSD-3-Clause",
    "revised bsd": "BSD-3-Clause",
    "simplified bsd": "BSD-2-Clause",
    "bsd-2": "BSD-2-Clause",
    "2-clause bsd": "BSD-2-Clause",
    "bsd 2-clause": "BSD-2-Clause",
    "bsd 2-clause license": "BSD-2-Clause",
    "freebsd": "BSD-2-Clause",
    "apache": "Apache-2.0",
    "apache 2": "Apache-2.0",
    "apache 2.0": "Apache-2.0",
    "apache-2": "Apache-2.0",
    "apache license 2.0": "Apache-2.0",
    "apache license, version 2.0": "Apache-2.0",
    "apache license version 2.0": "Apache-2.0",
    "apache software license": "Apache-2.0",
    "apache software license 2.0": "Apache-2.0",
    "asl 2.0": "Apache-2.0",
    "isc": "ISC",
    "isc license": "ISC",
    "isc license (iscl)": "ISC",
    "psf": "PSF-2.0",
    "psfl": "PSF-2.0",
    "psf license": "PSF-2.0",
    "python software foundation license": "PSF-2.0",
    "mpl 2.0": "MPL-2.0",
    "mpl-2": "MPL-2.0",
    "mozilla public license 2.0": "MPL-2.0",
    "mozilla public license 2.0 (mpl 2.0)": "MPL-2.0",
    "unlicense": "Unlicense",
    "the unlicense": "Unlicense",
    "the unlicense (unlicense)": "Unlicense",
    "zero-clause bsd (0bsd)": "0BSD",
    "zero-clause bsd": "0BSD",
    "cc0": "CC0-1.0",
    "cc0 1.0 universal (cc0 1.0) public domain dedication": "CC0-1.0",
    "zlib": "Zlib",
    "zlib/libpng license": "Zlib",
    "boost software license 1.0 (bsl-1.0)": "BSL-1.0",
    "historical permission notice and disclaimer (hpnd)": "HPND",
}
"""Free-form `License` values and trove classifier leaves (lower case, spaces collapsed) -> SPDX id. A bare "BSD" is
read as BSD-3-Clause: every BSD variant allows redistribution with its notice, which the tarball keeps."""

MIT_TEXT = (
    "permission is hereby granted free of charge to any person obtaining a copy of this software and associated "
    "documentation files the software to deal in the software without restriction including without limitation the "
    "rights to use copy modify merge publish distribute sublicense and or sell copies of the software and to permit "
    "persons to whom the software is furnished to do so subject to the following conditions the above copyright "
    "notice and this permission notice shall be included in all copies or substantial portions of the software the "
    "software is provided as is without warranty of any kind express or implied including but not limited to the "
    "warranties of merchantability fitness for a particular purpose and noninfringement in no event shall the "
    "authors or copyright holders be liable for any claim damages or other liability whether in an action of "
    "contract tort or otherwise arising from out of or in connection with the software or the use or other dealings "
    "in the software"
)
"""The MIT license's text, as words (lower case, punctuation dropped)."""
_TITLE = re.compile(r"^(the )?mit license( mit)?$|^mit$")
_COPYRIGHT = re.compile(r"^(copyright|c|\(c\)|\u00a9)\b")


def _words(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def _mit_text(text: str) -> bool:
    """Whether `text` is the MIT license word for word, under at most a title line and copyright lines."""
    words = _words(text)
    start = words.find(MIT_TEXT[:40])
    if start < 0 or words[start:] != MIT_TEXT:
        return False
    head = text.lower()[: text.lower().find("permission is hereby granted")]
    lines = [line.strip() for line in head.splitlines() if line.strip()]
    return all(_TITLE.match(_words(line)) or _COPYRIGHT.match(line) for line in lines)


_TOKEN = re.compile(r"\(|\)|[A-Za-z0-9.+\-:]+")


@dataclass(frozen=True)
class Verdict:
    """What `classify` decided."""

    allowed: bool
    license: str
    """The SPDX id or expression read (`LicenseRef-unknown` when nothing was recognised)."""
    reason: str
    """One line: the field read and why the package is in or out."""


def _normal(text: str) -> str:
    return " ".join(text.lower().replace("\u00a0", " ").split()).strip(" .")


def _expression(text: str) -> bool | None:
    """Evaluate an SPDX expression against `ALLOWED`; None when `text` is not one (an unknown id counts as not
    allowed, a token that is no SPDX id makes the whole text free-form)."""
    tokens = _TOKEN.findall(text)
    if not tokens or "".join(tokens) != "".join(text.split()):
        return None
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take() -> str:
        nonlocal position
        position += 1
        return tokens[position - 1]

    def atom() -> bool:
        token = take()
        if token == "(":
            value = disjunction()
            if take() != ")":
                raise ValueError
            return value
        if token in ("AND", "OR", "WITH", ")") or not re.fullmatch(
            r"[A-Za-z0-9.\-]+\+?|LicenseRef-[A-Za-z0-9.\-]+", token
        ):
            raise ValueError
        allowed = token.rstrip("+") in ALLOWED
        if peek() == "WITH":
            take()
            exception = take()
            allowed = allowed and exception in PERMISSIVE_EXCEPTIONS
        return allowed

    def conjunction() -> bool:
        value = atom()
        while peek() == "AND":
            take()
            value = atom() and value
        return value

    def disjunction() -> bool:
        value = conjunction()
        while peek() == "OR":
            take()
            value = conjunction() or value
        return value

    try:
        value = disjunction()
    except (ValueError, IndexError):
        return None
    if position != len(tokens):
        return None
    return value


def _name(text: str) -> str | None:
    normal = _normal(text)
    if normal in NAMES:
        return NAMES[normal]
    return "MIT" if _mit_text(text) else None


def _classifiers(values: list[str]) -> Verdict:
    leaves = [value.split("::")[-1].strip() for value in values if value.strip().startswith("License ::")]
    if not leaves or all(leaf in ("OSI Approved", "") for leaf in leaves):
        return Verdict(False, "LicenseRef-unknown", f"classifiers {values!r} name no license")
    named = [(leaf, _name(leaf)) for leaf in leaves if leaf != "OSI Approved"]
    unknown = [leaf for leaf, spdx in named if spdx is None]
    spdx = " AND ".join(sorted({spdx for _, spdx in named if spdx}) + (["LicenseRef-unknown"] if unknown else []))
    if unknown:
        return Verdict(False, spdx, f"classifier(s) {unknown} not on the allowlist")
    return Verdict(True, spdx, f"classifiers: {spdx}")


def classify(license: str | list[str] | None) -> Verdict:
    """Read a package's license (a `License-Expression`, a `License` text, or a list of trove classifiers; a string of
    `License ::` classifiers, one a line, is read as that list) and decide whether its source may be redistributed."""
    if license is None or (isinstance(license, str) and not license.strip()) or license == []:
        return Verdict(False, "LicenseRef-unknown", "no license in the package's metadata")
    if isinstance(license, list):
        stated = [value for value in license if not value.strip().startswith("License ::")]
        parts = [classify(value) for value in stated]
        if len(stated) < len(license):
            parts.append(_classifiers([value for value in license if value not in stated]))
        if len(parts) == 1:
            return parts[0]
        ids = " AND ".join(dict.fromkeys(part.license for part in parts))
        return Verdict(all(part.allowed for part in parts), ids, "; ".join(part.reason for part in parts))
    text = license.strip()
    if text.startswith("License ::"):
        return _classifiers([line for line in re.split(r"[\n;]", text) if line.strip()])
    first = text.splitlines()[0]
    expression = _expression(text) if len(text.splitlines()) == 1 else None
    if expression:
        return Verdict(True, text, f"SPDX expression {text!r}: allowed")
    spdx = _name(text)  # "BSD", "Apache 2.0", a full license text
    if spdx is not None:
        return Verdict(True, spdx, f"license {first[:60]!r} read as {spdx}")
    if expression is False:
        return Verdict(False, text, f"SPDX expression {text!r}: not on the allowlist")
    if len(text.splitlines()) > 1 or len(text) > 100:
        return Verdict(
            False,
            "LicenseRef-unknown",
            f"license text starting {first[:60]!r} is not, word for word, a "
            "license text this list recognises (only MIT's is matched): read it, then add its name to NAMES",
        )
    return Verdict(False, "LicenseRef-unknown", f"license {first[:60]!r} is not a license this list recognises")
