"""The agent's coding tools: their contract (names, arguments, JSON schemas), argument parsing, and execution.

The names and arguments are a fixed contract (scripted model servers in other tests drive the harness by them):

    bash(command, timeout=None)            run a shell command in the work directory
    view(path, start_line=None, end_line=None)   a file's numbered lines, or a directory listing
    str_replace(path, old_str, new_str)    replace a string that occurs exactly once in a file
    create(path, content)                  create or overwrite a file
    search(pattern, path=None)             extended regex (grep -E) over file contents under a path
    finish(message=None)                   end the rollout

Every way a call can go wrong (arguments that are not JSON, an unknown tool, a missing or wrongly typed argument, a
path outside the work directory, a command past its timeout, a failed edit) becomes a tool message the model reads,
tagged with an error kind the loop counts; nothing here raises into the loop for the model's mistakes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError
from verifiers.v1.errors import SandboxError

from composer_agent.config import TOOL_NAMES, ComposerAgentConfig
from composer_agent.text import PathEscape
from composer_agent.workspace import EXIT_BAD_REQUEST, EXIT_ESCAPE, ScriptResult
from composer_prime.text import truncate_middle

if TYPE_CHECKING:
    from composer_agent.workspace import Workspace

ERROR_KINDS = (
    "malformed_json",
    "unknown_tool",
    "bad_arguments",
    "path_escape",
    "timeout",
    "tool_failed",
    "empty_reply",
)
"""Error kinds counted on the trace (`composer/agent/tool_errors/<kind>`). `empty_reply` is a reply with neither text
nor tool calls; the others belong to one tool call."""


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BashArgs(_Args):
    """Run a bash command in the task's work directory and return its combined stdout and stderr (long output keeps
    its head and tail). The command runs non-interactively (stdin is empty); on timeout its whole process group is
    killed."""

    command: StrictStr = Field(description="The bash command to run.")
    timeout: StrictInt | None = Field(
        None, description="Seconds before the command is killed (default set by the harness)."
    )


class ViewArgs(_Args):
    """View a text file with line numbers, optionally only a line range, or list a directory (two levels deep)."""

    path: StrictStr = Field(description="File or directory path, relative to the work directory.")
    start_line: StrictInt | None = Field(None, description="First line to show (1-based, inclusive).")
    end_line: StrictInt | None = Field(None, description="Last line to show (inclusive); omit for the end of the file.")


class StrReplaceArgs(_Args):
    """Replace `old_str` with `new_str` in a file. `old_str` must occur exactly once; include surrounding lines to
    make it unique."""

    path: StrictStr = Field(description="File path, relative to the work directory.")
    old_str: StrictStr = Field(description="The exact text to replace (must occur exactly once).")
    new_str: StrictStr = Field(description="The replacement text.")


class CreateArgs(_Args):
    """Create a file with the given content, or overwrite it. Parent directories are created."""

    path: StrictStr = Field(description="File path, relative to the work directory.")
    content: StrictStr = Field(description="The complete file content.")


class SearchArgs(_Args):
    """Search file contents under a path with an extended regular expression (grep -E); returns matching lines as
    path:line:text."""

    pattern: StrictStr = Field(description="Extended regular expression (grep -E syntax).")
    path: StrictStr | None = Field(
        None, description="File or directory to search, relative to the work directory (default: all of it)."
    )


class FinishArgs(_Args):
    """Finish the task: call this once the work is done. Ends the rollout."""

    message: StrictStr | None = Field(None, description="Optional closing note on what was done.")


ARGS: dict[str, type[_Args]] = {
    "bash": BashArgs,
    "view": ViewArgs,
    "str_replace": StrReplaceArgs,
    "create": CreateArgs,
    "search": SearchArgs,
    "finish": FinishArgs,
}


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def tool_specs(disabled: list[str] | None = None) -> list[dict[str, Any]]:
    """OpenAI function-tool specs for the enabled tools, generated from the argument models."""
    specs = []
    for name, model in ARGS.items():
        if name in (disabled or []):
            continue
        parameters = _strip_titles(model.model_json_schema())
        parameters.pop("description", None)
        parameters["additionalProperties"] = False
        description = " ".join((model.__doc__ or "").split())
        specs.append(
            {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}
        )
    return specs


@dataclass(frozen=True)
class ToolResult:
    content: str
    error: str | None = None
    """One of ERROR_KINDS, or None for a call that did its job."""
    finish: bool = False


@dataclass(frozen=True)
class ParsedCall:
    name: str
    args: _Args


def parse_call(name: Any, arguments: Any, enabled: tuple[str, ...]) -> ParsedCall | ToolResult:
    """Validate one tool call from the model: a ParsedCall, or the ToolResult telling the model what was wrong.

    `arguments` is the JSON text the protocol specifies; an already-decoded object is accepted as well."""
    if not isinstance(name, str) or name not in enabled:
        return ToolResult(
            f"Error: unknown tool {name!r}. The available tools are: {', '.join(enabled)}.", error="unknown_tool"
        )
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        arguments = "{}"
    try:
        payload = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError as e:
        return ToolResult(
            f"Error: the arguments of {name} are not valid JSON ({e.msg} at position {e.pos}). "
            f"Send the arguments as one JSON object, e.g. {_example(name)}.",
            error="malformed_json",
        )
    if not isinstance(payload, dict):
        return ToolResult(
            f"Error: the arguments of {name} must be a JSON object, got {type(payload).__name__}. "
            f"Example: {_example(name)}.",
            error="malformed_json",
        )
    try:
        return ParsedCall(name, ARGS[name].model_validate(payload))
    except ValidationError as e:
        problems = []
        for err in e.errors():
            field = ".".join(str(p) for p in err["loc"]) or "(arguments)"
            if err["type"] == "missing":
                problems.append(f"missing required argument {field!r}")
            elif err["type"] == "extra_forbidden":
                problems.append(f"unexpected argument {field!r}")
            else:
                problems.append(f"argument {field!r} {err['msg'].lower()} (got {_short(err.get('input'))})")
        return ToolResult(
            f"Error: invalid arguments for {name}: {'; '.join(problems)}. Example: {_example(name)}.",
            error="bad_arguments",
        )


_EXAMPLES = {
    "bash": {"command": "ls -la"},
    "view": {"path": "src/main.py", "start_line": 1, "end_line": 40},
    "str_replace": {"path": "src/main.py", "old_str": "x = 1", "new_str": "x = 2"},
    "create": {"path": "notes.txt", "content": "hello\n"},
    "search": {"pattern": "def main", "path": "src"},
    "finish": {"message": "done"},
}


def _example(name: str) -> str:
    return json.dumps(_EXAMPLES[name])


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Toolbox:
    """Executes parsed tool calls in the work directory."""

    def __init__(self, workspace: Workspace, config: ComposerAgentConfig):
        self.ws = workspace
        self.config = config
        self.enabled = tuple(n for n in TOOL_NAMES if n not in (config.disabled_tools or []))

    def specs(self) -> list[dict[str, Any]]:
        return tool_specs(self.config.disabled_tools)

    async def call(self, name: Any, arguments: Any) -> ToolResult:
        parsed = parse_call(name, arguments, self.enabled)
        if isinstance(parsed, ToolResult):
            return parsed
        try:
            result = await getattr(self, f"_{parsed.name}")(parsed.args)
        except PathEscape as e:
            return ToolResult(f"Error: {e}", error="path_escape")
        except TimeoutError:
            return ToolResult(f"Error: {parsed.name} did not finish within its time limit.", error="timeout")
        except (OSError, UnicodeDecodeError, SandboxError) as e:
            return ToolResult(f"Error: {parsed.name} failed: {e}", error="tool_failed")
        return ToolResult(
            truncate_middle(result.content, self.config.tool_output_max_chars), result.error, result.finish
        )

    async def _bash(self, args: BashArgs) -> ToolResult:
        note = ""
        timeout = self.config.bash_timeout_s if args.timeout is None else args.timeout
        if timeout < 1:
            return ToolResult(f"Error: timeout must be at least 1 second (got {timeout}).", error="bad_arguments")
        if timeout > self.config.max_bash_timeout_s:
            note = f"[timeout {timeout}s lowered to the limit of {self.config.max_bash_timeout_s}s]\n"
            timeout = self.config.max_bash_timeout_s
        result = await self.ws.shell(args.command, timeout)
        if result.timed_out:
            return ToolResult(
                f"{note}{result.output}\n[command timed out after {timeout}s; its process group was killed]",
                error="timeout",
            )
        return ToolResult(f"{note}{result.output}\n[exit code {result.exit_code}]")

    async def _view(self, args: ViewArgs) -> ToolResult:
        path = self.ws.resolve(args.path)
        start = 1 if args.start_line is None else args.start_line
        end = 0 if args.end_line is None else args.end_line
        if start < 1 or (args.end_line is not None and end < start):
            return ToolResult(
                f"Error: invalid line range start_line={args.start_line}, end_line={args.end_line}; "
                "lines are 1-based and end_line must not be before start_line.",
                error="bad_arguments",
            )
        return self._script_result(await self.ws.view(path, start, end, self.config.search_max_matches))

    async def _str_replace(self, args: StrReplaceArgs) -> ToolResult:
        path = self.ws.resolve(args.path)
        if not args.old_str:
            return ToolResult("Error: old_str is empty; give the exact text to replace.", error="bad_arguments")
        try:
            data = await self.ws.read(path, self.config.max_file_bytes)
        except OSError as e:
            return ToolResult(
                f"Error: {e} (str_replace edits an existing text file; use create for a new one).", error="tool_failed"
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return ToolResult(
                f"Error: {args.path} is not UTF-8 text; str_replace edits text files.", error="tool_failed"
            )
        count = text.count(args.old_str)
        if count != 1:
            where = "does not occur" if count == 0 else f"occurs {count} times"
            return ToolResult(
                f"Error: old_str {where} in {args.path}; it must occur exactly once. "
                + ("View the file to copy the exact text." if count == 0 else "Include more surrounding lines."),
                error="tool_failed",
            )
        new = text.replace(args.old_str, args.new_str, 1)
        await self.ws.write(path, new.encode("utf-8"))
        first = text[: text.index(args.old_str)].count("\n") + 1
        lines = new.splitlines()
        lo, hi = max(1, first - 3), min(len(lines), first + args.new_str.count("\n") + 3)
        snippet = "\n".join(f"{n:6d}\t{lines[n - 1]}" for n in range(lo, hi + 1))
        return ToolResult(f"Replaced 1 occurrence in {args.path}. Lines {lo}-{hi} now:\n{snippet}")

    async def _create(self, args: CreateArgs) -> ToolResult:
        path = self.ws.resolve(args.path)
        if path == ".":
            return ToolResult("Error: create needs a file path, not the work directory.", error="bad_arguments")
        kind = await self.ws.kind(path)
        if kind in ("dir", "other"):
            return ToolResult(f"Error: {args.path} exists and is not a regular file ({kind}).", error="tool_failed")
        await self.ws.write(path, args.content.encode("utf-8"))
        verb = "Overwrote" if kind == "file" else "Created"
        return ToolResult(f"{verb} {args.path} ({len(args.content.splitlines())} lines).")

    async def _search(self, args: SearchArgs) -> ToolResult:
        path = self.ws.resolve(args.path if args.path is not None else ".")
        if not args.pattern:
            return ToolResult("Error: pattern is empty.", error="bad_arguments")
        return self._script_result(await self.ws.search(args.pattern, path, self.config.search_max_matches))

    async def _finish(self, args: FinishArgs) -> ToolResult:
        return ToolResult(args.message or "Finished.", finish=True)

    @staticmethod
    def _script_result(result: ScriptResult) -> ToolResult:
        if result.exit_code == 0:
            return ToolResult(result.output)
        kind = {EXIT_ESCAPE: "path_escape", EXIT_BAD_REQUEST: "bad_arguments"}.get(result.exit_code, "tool_failed")
        return ToolResult(f"Error: {result.output.strip()}", error=kind)
