"""What a finished trace shows about each of its steps: the one reader of traces for failures.

A *step* is a sampled assistant message (a node of `trace.nodes` with `sampled=True`). Its evidence comes from the
tool messages that answer its tool calls, in the formats composer-agent writes (`composer_agent/tools.py`):

- **tool_error**: the tool refused or failed (`Error: ...`, a timed-out command), or a shell command that is not a
  test run exited non-zero with a Python traceback or a shell error in its output.
- **test_failure**: a shell command that runs tests (pytest, unittest, tox, ...) exited non-zero.
- **edit_then_failure**: the step edited files (`str_replace`, `create`, or an editing shell command) and the next
  test run on the same branch failed; the failure's output is attributed to the edit that preceded it.

Other harnesses' tool messages are read with the same rules; what does not match yields no evidence, never an error.
Both the teacher hook (which steps are worth a teacher's verdict) and the composer algorithm (which steps become hint
targets, and what the hint says) read traces through `steps()`, so the two agree on what went wrong where.

Summary turns are found by structure, not by prompt text: self-summarisation ends a branch with a sampled reply and
continues on a new branch, so the leaf of any branch but the last is a summary (or a rejected summary attempt).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

FailureKind = Literal["tool_error", "test_failure", "edit_then_failure"]

DETAIL_MAX_CHARS = 1500
"""Evidence text is trimmed to this many characters (failing-test lines and the output's tail are kept)."""

EDIT_TOOLS = frozenset({"str_replace", "create"})
_TEST_COMMAND = re.compile(r"\bpytest\b|\bpy\.test\b|-m\s+unittest\b|\btox\b|\bnox\b|manage\.py\s+test\b")
_EDIT_COMMAND = re.compile(r"\bsed\s+-i|\bpatch\b|\bgit\s+apply\b|\bcat\s*>|\btee\b|>\s*[\w./-]+\.py\b")
_EXIT_CODE = re.compile(r"\[exit code (-?\d+)\]\s*$")
_TIMED_OUT = re.compile(r"\[command timed out after [^\]]*\]\s*$")
_SHELL_ERROR = re.compile(r"Traceback \(most recent call last\)|command not found|SyntaxError:|No such file or directory")
_FAILING_LINE = re.compile(r"^(FAILED|ERROR)\b|^E\s|Error\b|assert", re.MULTILINE)


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    detail: str
    """The error text or the failing test output, trimmed to `DETAIL_MAX_CHARS`."""


@dataclass(frozen=True)
class Step:
    node: int
    """Index into `trace.nodes` of a sampled assistant node."""
    branch: int
    """Index of the first of `trace.branches` whose path holds the node."""
    turn: int
    """0-based order among the trace's sampled assistant steps."""
    tools: tuple[str, ...]
    """Names of the tool calls the step made, in order."""
    failures: tuple[Failure, ...]
    """Evidence from the tool messages answering the step, most informative first."""
    is_final: bool
    """The last sampled step of the trace."""
    is_summary: bool
    """A self-summary turn: the sampled leaf of a branch that is not the trace's last."""
    mean_logprob: float | None
    """Mean sampled-token logprob when the node carries logprobs."""


def message_text(message: Any) -> str:
    """The text of a message's content (str, or a list of text parts), '' when it has none."""
    content = _field(message, "content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        text = _field(part, "text")
        if isinstance(text, str):
            parts.append(text)
    return "\n".join(parts)


def tool_calls(message: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """(id, name, parsed arguments) of a message's tool calls; arguments that are not a JSON object parse to {}."""
    calls = []
    for call in _field(message, "tool_calls") or []:
        function = _field(call, "function")
        name = _field(call, "name") or _field(function, "name") or ""
        raw = _field(call, "arguments")
        if raw is None:
            raw = _field(function, "arguments")
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            arguments = None
        calls.append((_field(call, "id") or "", str(name), arguments if isinstance(arguments, dict) else {}))
    return calls


def is_test_command(command: str) -> bool:
    return bool(_TEST_COMMAND.search(command))


def is_edit(name: str, arguments: dict[str, Any]) -> bool:
    if name in EDIT_TOOLS:
        return True
    command = arguments.get("command")
    return name == "bash" and isinstance(command, str) and bool(_EDIT_COMMAND.search(command))


def steps(trace: Any) -> list[Step]:
    """Every sampled assistant step of `trace`, in trace order, with its evidence."""
    nodes = trace.nodes
    children: dict[int, list[int]] = {}
    for i, node in enumerate(nodes):
        if node.parent is not None:
            children.setdefault(node.parent, []).append(i)
    paths = _branch_paths(nodes, children)
    first_branch: dict[int, int] = {}
    for b, path in enumerate(paths):
        for n in path:
            first_branch.setdefault(n, b)
    summary_leaves = {path[-1] for path in paths[:-1] if path}

    sampled = [i for i, node in enumerate(nodes) if node.sampled and _field(node.message, "role") == "assistant"]
    outcomes = {i: _outcomes(nodes, children, i) for i in sampled}
    edit_failures = _edit_failures(paths, outcomes)

    result = []
    for turn, i in enumerate(sampled):
        node = nodes[i]
        failures = [f for _, _, f in outcomes[i] if f is not None]
        failures += edit_failures.get(i, [])
        failures.sort(key=lambda f: _KIND_ORDER[f.kind])
        logprobs = list(getattr(node, "logprobs", None) or [])
        result.append(
            Step(
                node=i,
                branch=first_branch.get(i, 0),
                turn=turn,
                tools=tuple(name for _, name, _ in tool_calls(node.message)),
                failures=tuple(failures),
                is_final=turn == len(sampled) - 1,
                is_summary=i in summary_leaves,
                mean_logprob=sum(logprobs) / len(logprobs) if logprobs else None,
            )
        )
    return result


_KIND_ORDER = {"test_failure": 0, "tool_error": 1, "edit_then_failure": 2}


def _field(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _branch_paths(nodes: list[Any], children: dict[int, list[int]]) -> list[list[int]]:
    """Root-to-leaf node paths, one per leaf in ascending leaf order (verifiers' `Trace.branches` order)."""
    paths = []
    for leaf in (i for i in range(len(nodes)) if i not in children):
        path, current, seen = [], leaf, set()
        while current is not None and current not in seen and 0 <= current < len(nodes):
            seen.add(current)
            path.append(current)
            current = nodes[current].parent
        paths.append(path[::-1])
    return paths


def _outcomes(
    nodes: list[Any], children: dict[int, list[int]], step: int
) -> list[tuple[bool, bool, Failure | None]]:
    """(was an edit, was a test run, failure) for each tool call of `step`, read from the tool messages after it."""
    answers: dict[str, str] = {}
    current = step
    while True:
        tool_children = [c for c in children.get(current, []) if _field(nodes[c].message, "role") == "tool"]
        if not tool_children:
            break
        current = tool_children[0]
        message = nodes[current].message
        answers.setdefault(_field(message, "tool_call_id") or f"#{len(answers)}", message_text(message))
    outcomes = []
    ordered = list(answers.values())
    for k, (call_id, name, arguments) in enumerate(tool_calls(nodes[step].message)):
        text = answers.get(call_id) if call_id else None
        if text is None and k < len(ordered):
            text = ordered[k]
        command = arguments.get("command") if name == "bash" else None
        testing = isinstance(command, str) and is_test_command(command)
        outcomes.append((is_edit(name, arguments), testing, _failure(text, testing)))
    return outcomes


def _failure(text: str | None, testing: bool) -> Failure | None:
    if text is None:
        return None
    body = text.strip()
    if body.startswith("Error:") or _TIMED_OUT.search(body):
        return Failure("tool_error", trim(body))
    exit_code = _EXIT_CODE.search(body)
    if exit_code is None or int(exit_code.group(1)) == 0:
        return None
    if testing:
        return Failure("test_failure", trim(body))
    if _SHELL_ERROR.search(body):
        return Failure("tool_error", trim(body))
    return None


def _edit_failures(
    paths: list[list[int]], outcomes: dict[int, list[tuple[bool, bool, Failure | None]]]
) -> dict[int, list[Failure]]:
    """Attribute each failed test run to the edits made since the previous test run on its branch."""
    found: dict[int, list[Failure]] = {}
    for path in paths:
        pending: list[int] = []
        for i in path:
            for edited, testing, failure in outcomes.get(i, []):
                if testing:
                    if failure is not None and failure.kind == "test_failure":
                        for e in pending:
                            attributed = Failure("edit_then_failure", failure.detail)
                            if attributed not in found.setdefault(e, []):
                                found[e].append(attributed)
                    pending = []
                elif edited and i not in pending:
                    pending.append(i)
    return found


def trim(text: str, limit: int = DETAIL_MAX_CHARS) -> str:
    """Keep failing-test and error lines first, then the output's tail, within `limit` characters."""
    text = text.strip()
    if len(text) <= limit:
        return text
    key_lines = [line for line in text.splitlines() if _FAILING_LINE.search(line)]
    head = "\n".join(key_lines)[: limit // 2]
    tail_room = limit - len(head) - 5
    return f"{head}\n...\n{text[-tail_room:]}" if head else "...\n" + text[-(limit - 4) :]
