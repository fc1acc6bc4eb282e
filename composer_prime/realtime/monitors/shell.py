"""Shell command lines read as their simple commands, for the test-tampering rules (`tampering.shell_disables`).

The reading is static and errs toward seeing more commands, not fewer: heredoc bodies are cut out and kept,
command substitutions (`$(...)`, backticks) are replaced by the paths the inner command names (`echo tests`,
`ls -d te*s`, `find tests -name ...`) and also returned as commands of their own, compound syntax (`for ...; do
...; done`, `if ...; then ...; fi`, `{ ...; }`, `( ... )`) is opened to its command words, and brace expansions
(`te{s,}ts`) are expanded (up to `MAX_BRACES` words). Every step is linear in the command's length: the words are
read by one regular expression (`TOKEN`), not `shlex`, whose token building is quadratic in a long word.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

KEYWORDS = {"do", "then", "else", "elif", "if", "while", "until", "{", "}", "!", "done", "fi", "esac", "in"}
"""Compound-syntax words that open or close a command list; the command starts after them."""
LISTERS = {"echo", "printf", "ls", "find", "realpath", "readlink", "basename", "dirname", "cat"}
"""Commands whose output is the paths they are given (a substitution of one stands for those paths)."""
UNRESOLVED = "__unresolved__"
MAX_BRACES = 256
"""Most words one brace expansion stands for; a word that expands to more is left unresolved."""
TOKEN = re.compile(r"""#[^\n]*|\n|[();<>|&]+|(?:[^\s'"\\();<>|&]+|\\.|'[^']*'?|"[^"\\]*(?:\\.[^"\\]*)*"?)+""", re.S)
"""A shell token: a comment (at a word's start), a newline, a run of operator characters, or a word with its
quotes; linear in the command's length (quotes left open run to the end)."""
QUOTED = re.compile(r"""\\(.)|'([^']*)'?|"([^"\\]*(?:\\.[^"\\]*)*)"?""", re.S)


def heredocs(command: str) -> tuple[str, list[str]]:
    """The command with each heredoc body cut out (its marker left as `<<HEREDOC<n>`), and the bodies."""
    bodies: list[str] = []
    out: list[str] = []
    pos = 0
    while pos <= len(command):
        end = command.find("\n", pos) % (len(command) + 1)
        line, pos = command[pos:end], end + 1
        for _, tag in re.findall(r"<<-?\s*(['\"]?)(\w+)\1", line):
            close = re.compile(rf"^[ \t]*{tag}[ \t]*$", re.M).search(command, pos) if pos <= len(command) else None
            stop = close.start() if close else len(command)
            bodies.append(command[pos:stop].removesuffix("\n"))
            pos = close.end() + 1 if close else len(command) + 1
            line = re.sub(r"<<-?\s*(['\"]?)" + tag + r"\1", f"<<HEREDOC{len(bodies) - 1}", line, count=1)
        out.append(line)
    return "\n".join(out), bodies


def _unquote(match: re.Match[str]) -> str:
    escaped, single, double = match.groups()
    if escaped is not None:
        return "" if escaped == "\n" else escaped
    return single if single is not None else re.sub(r"\\([$`\"\\\n])", r"\1", double or "")


def split(command: str) -> list[str]:
    """The tokens of `command` as a POSIX shell reads them: quotes removed, comments dropped, each newline a `;`,
    operators (`;`, `&&`, `|`, `>`, `2>&1`'s `>&`) tokens of their own."""
    out = []
    for match in TOKEN.finditer(command):
        token = match.group(0)
        if token == "\n":
            out.append(";")
        elif not token.startswith("#"):
            out.append(token if set(token) <= set("();<>|&") else QUOTED.sub(_unquote, token))
    return out


def _listed(inner: str) -> str:
    """The paths a substituted command stands for, or `UNRESOLVED`."""
    words = split(inner)
    if words[:2] == ["git", "ls-files"]:
        words = words[1:]
    if not words or words[0].rsplit("/", 1)[-1] not in LISTERS | {"ls-files"}:
        return UNRESOLVED
    names = [w for i, w in enumerate(words) if i and words[i - 1] in ("-name", "-iname", "-path")]
    paths = names or [w for w in words[1:] if not w.startswith("-") and w not in names]
    return " ".join("'" + p.replace("'", "'\\''") + "'" for p in paths) or UNRESOLVED


def substitutions(command: str) -> tuple[str, list[str]]:
    """The command with each `$(...)` and backtick substitution replaced by the paths it lists, and the inner
    commands."""
    inners: list[str] = []
    out, i = [], 0
    for start in re.finditer(r"\$\((?!\()|`", command):
        if start.start() < i:
            continue
        out.append(command[i : start.start()])
        if start.group(0) == "`":
            j = command.find("`", start.end()) + 1 or len(command) + 1
            inner = command[start.end() : j - 1]
        else:
            depth, j = 1, start.end()
            for paren in re.compile(r"[()]").finditer(command, j):
                depth += 1 if paren.group(0) == "(" else -1
                if not depth:
                    j = paren.end()
                    break
            else:  # never closed: a syntax error, nothing runs; the rest is one unresolved word
                out.append(UNRESOLVED)
                i = len(command)
                break
            inner = command[start.end() : j - 1]
        inners.append(inner)
        out.append(_listed(inner))
        i = j
    out.append(command[i:])
    return "".join(out), inners


def braces(word: str) -> list[str]:
    """The words a brace expansion stands for (`te{s,}ts` -> `tests`, `tets`); the word itself when it has none,
    `UNRESOLVED` when it stands for more than `MAX_BRACES` words."""
    words, done = [word], []
    while words:
        w = words.pop()
        match = re.search(r"\{([^{}]*,[^{}]*)\}", w)
        if not match:
            done.append(w)
        else:
            words.extend(w[: match.start()] + part + w[match.end() :] for part in reversed(match.group(1).split(",")))
        if len(words) + len(done) > MAX_BRACES:
            return [UNRESOLVED]
    return done


def segments(command: str, variables: dict[str, str]) -> Iterator[tuple[list[str], bool]]:
    """The simple commands of `command` as word lists, quotes removed, compound-syntax keywords dropped, `$NAME` of
    earlier assignments and `for NAME in ...` loops filled in; redirections stay words (`>`, `>>`, `>&`). Each comes
    with whether a pipe feeds it."""
    tokens = split(command.replace("\\\n", ""))
    segment: list[str] = []
    piped = False
    for token in tokens + [";"]:
        if token and set(token) <= set(";&|()"):
            while segment and segment[0] in KEYWORDS:
                segment.pop(0)
            if len(segment) >= 3 and segment[0] in ("for", "select") and segment[2] == "in":
                variables[segment[1]] = " ".join(segment[3:])
            elif segment:
                yield segment, piped
            segment, piped = [], token == "|"
            continue
        whole = re.fullmatch(r"\$\{?(\w+)\}?", token)
        if whole and whole.group(1) in variables:
            segment.extend(variables[whole.group(1)].split())
            continue
        token = re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m.group(1), m.group(0)), token)
        segment.extend(braces(token))


def sed_edits(script: str) -> list[tuple[str, str]] | None:
    """The (old, new) text pairs of a `sed` / `perl -pe` script made only of substitutions (`s/old/new/g`), or None
    when it deletes lines or does anything else that cannot be judged from the script."""
    pairs = []
    for part in re.split(r"\s*;\s*(?=s\W|\d|/|$)", script.strip()):
        if not part:
            continue
        match = re.fullmatch(r"s(\W)((?:\\.|(?!\1).)*)\1((?:\\.|(?!\1).)*)\1[a-zA-Z0-9]*", part, re.S)
        if not match:
            return None
        pairs.append((match.group(2).replace("\\", ""), match.group(3).replace("\\", "")))
    return pairs
