"""The tools against a real subprocess runtime (no model): what the model reads back for each kind of call."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from verifiers.v1.runtimes.subprocess import SubprocessConfig, SubprocessRuntime

from composer_agent.config import ComposerAgentConfig
from composer_agent.tools import Toolbox, ToolResult
from composer_agent.workspace import Workspace

Call = Callable[..., Awaitable[ToolResult]]


def with_toolbox(
    test: Callable[[Call, SubprocessRuntime], Awaitable[None]],
    env: dict[str, str] | None = None,
    reap: bool = False,
    **config: Any,
) -> None:
    async def main() -> None:
        runtime = SubprocessRuntime(SubprocessConfig())
        await runtime.start()
        try:
            cfg = ComposerAgentConfig(**config)
            workspace = Workspace(runtime, env or {}, output_cap_bytes=cfg.tool_output_max_chars - 200, op_timeout_s=30)
            await workspace.probe()
            assert workspace.missing == []
            toolbox = Toolbox(workspace, cfg)

            async def call(name: str, **args: Any) -> ToolResult:
                import json

                return await toolbox.call(name, json.dumps(args))

            try:
                await test(call, runtime)
            finally:
                if reap:
                    await workspace.reap()
        finally:
            await runtime.stop()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_view_ranges_listings_and_binary_files() -> None:
    async def test(call: Call, runtime: SubprocessRuntime) -> None:
        await runtime.write("src/app.py", "".join(f"line {i}\n" for i in range(1, 11)).encode())
        await runtime.write("blob.bin", b"\x00\x01\x02" * 10)
        r = await call("view", path="src/app.py", start_line=3, end_line=4)
        assert r.error is None and r.content == "# src/app.py: lines 3-4 of 10\n     3\tline 3\n     4\tline 4\n"
        r = await call("view", path="./src//app.py", start_line=9)
        assert r.content.splitlines() == ["# src/app.py: lines 9-10 of 10", "     9\tline 9", "    10\tline 10"]
        r = await call("view", path="src/app.py", start_line=11)
        assert r.error == "bad_arguments" and "past the end" in r.content
        r = await call("view", path="src/app.py", start_line=5, end_line=2)
        assert r.error == "bad_arguments"
        r = await call("view", path=".")
        assert r.content.splitlines()[1:] == ["f blob.bin", "d src", "f src/app.py"]
        r = await call("view", path="blob.bin")
        assert r.error == "tool_failed" and "blob.bin is a binary file" in r.content
        r = await call("view", path="missing.py")
        assert r.error == "tool_failed" and "no such file" in r.content
        root = (await runtime.run(["pwd"], {})).stdout.strip()
        r = await call("view", path=f"{root}/src/app.py", end_line=1)
        assert r.error is None and "     1\tline 1" in r.content  # an absolute path inside the work directory

    with_toolbox(test)


def test_long_output_keeps_head_and_tail() -> None:
    async def test(call: Call, runtime: SubprocessRuntime) -> None:
        r = await call("bash", command="echo BEGIN; head -c 300000 /dev/zero | tr '\\0' x; echo; echo END; exit 3")
        assert r.error is None
        assert len(r.content) <= 5000 + 100
        assert r.content.startswith("BEGIN\nxxx") and r.content.endswith("END\n\n[exit code 3]")
        assert "truncated" in r.content

    with_toolbox(test, tool_output_max_chars=5000)


def scratch_sizes(directory: Path) -> list[int]:
    """Sizes of the files under `directory` that some process holds open, unlinked ones included."""
    sizes = []
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if os.readlink(fd).startswith(f"{directory}/"):
                sizes.append(os.stat(fd).st_size)
        except OSError:
            continue
    return sizes


def test_shell_output_is_capped_while_the_command_runs(tmp_path: Path) -> None:
    """20 MB of output, then the command hangs and the rollout is cancelled: while it runs, what is kept on disk is
    the head and tail (a few kB), and nothing is left in TMPDIR after the cancellation."""

    async def test(call: Call, runtime: SubprocessRuntime) -> None:
        command = "head -c 20000000 /dev/zero | tr '\\0' y; echo; sleep 60"
        task = asyncio.ensure_future(call("bash", command=command, timeout=120))
        deadline = time.monotonic() + 20
        seen: list[int] = []
        while time.monotonic() < deadline and not (seen := scratch_sizes(tmp_path)):
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # the 20 MB have been written by now
        sizes = scratch_sizes(tmp_path)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert seen and sizes and max(sizes) <= 5000, sizes

    with_toolbox(test, env={"TMPDIR": str(tmp_path)}, tool_output_max_chars=5000, reap=True)
    assert list(tmp_path.iterdir()) == []


def test_shell_sees_only_allowed_host_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """A credential in the worker's environment under any name stays out of the agent's shell; the allow-list, the
    harness's `env` and the task's runtime variables get through."""

    async def test(call: Call, runtime: SubprocessRuntime) -> None:
        r = await call("bash", command="env")
        names = {line.split("=", 1)[0] for line in r.content.splitlines() if "=" in line}
        assert "COMPOSER_TEST_SECRET" not in names and "s3cr3t" not in r.content
        assert {"PATH", "HOME", "FROM_HARNESS"} <= names

    monkeypatch.setenv("COMPOSER_TEST_SECRET", "s3cr3t")
    with_toolbox(test, env={"FROM_HARNESS": "1"})


def test_killed_command_shows_no_harness_internals() -> None:
    async def test(call: Call, runtime: SubprocessRuntime) -> None:
        r = await call("bash", command="echo before; trap '' TERM; sleep 60", timeout=1)
        assert r.error == "timeout"
        assert r.content == "before\n\n[command timed out after 1s; its process group was killed]", r.content

    with_toolbox(test)


def test_search_and_edits() -> None:
    async def test(call: Call, runtime: SubprocessRuntime) -> None:
        await runtime.write("pkg/a.py", b"def alpha():\n    return 1\n")
        await runtime.write("pkg/b.py", "".join(f"hit {i}\n" for i in range(50)).encode())
        await runtime.write(".git/objects/x", b"hit in git\n")
        r = await call("search", pattern=r"def (alpha|beta)\(")
        assert r.content.splitlines() == [
            "# 1 matching lines for /def (alpha|beta)\\(/ under .",
            "pkg/a.py:1:def alpha():",
        ]
        r = await call("search", pattern="^hit", path="pkg")
        lines = r.content.splitlines()
        assert lines[0] == "# 50 matching lines for /^hit/ under pkg" and len(lines) == 1 + 10 + 1
        assert lines[-1].startswith("[... 40 more matching lines not shown")
        r = await call("search", pattern="nothing here")
        assert r.error is None and r.content.startswith("no matches")
        r = await call("search", pattern="(unclosed")
        assert r.error == "bad_arguments" and "grep failed" in r.content

        r = await call("str_replace", path="pkg/a.py", old_str="return 1", new_str="return 2")
        assert r.error is None and "     2\t    return 2" in r.content
        assert (await runtime.read("pkg/a.py")).decode() == "def alpha():\n    return 2\n"
        r = await call("str_replace", path="pkg/new.py", old_str="x", new_str="y")
        assert r.error == "tool_failed" and "use create" in r.content
        r = await call("create", path="pkg", content="x")
        assert r.error == "tool_failed" and "not a regular file" in r.content
        r = await call("create", path="deep/er/c.txt", content="é\n")
        assert r.content == "Created deep/er/c.txt (1 lines)."
        assert (await runtime.read("deep/er/c.txt")).decode() == "é\n"
        r = await call("create", path="-n", content="dash\n")
        assert r.content == "Created -n (1 lines)."
        r = await call("view", path="-n")
        assert r.content.splitlines() == ["# ./-n: lines 1-1 of 1", "     1\tdash"]
        r = await call("create", path="deep/er/c.txt", content="again\n")
        assert r.content.startswith("Overwrote")

    with_toolbox(test, search_max_matches=10)


def test_bash_timeouts_are_bounded() -> None:
    async def test(call: Call, runtime: SubprocessRuntime) -> None:
        r = await call("bash", command="echo ok", timeout=10_000)
        assert r.error is None and r.content.startswith("[timeout 10000s lowered to the limit of 5s]\nok\n")
        r = await call("bash", command="echo ok", timeout=0)
        assert r.error == "bad_arguments"
        r = await call("bash", command="read line; echo got:$line")  # stdin is empty, not the host's
        assert r.content.startswith("got:\n")

    with_toolbox(test, bash_timeout_s=2, max_bash_timeout_s=5)


@pytest.mark.parametrize("disabled", [["search", "create"]])
def test_disabled_tools_are_unknown(disabled: list[str]) -> None:
    async def test(call: Call, runtime: SubprocessRuntime) -> None:
        r = await call("search", pattern="x")
        assert r.error == "unknown_tool" and "search" not in r.content.split("available tools are:")[1]

    with_toolbox(test, disabled_tools=disabled)


def test_edits_refuse_binary_and_oversized_files_and_leave_no_scratch_files(tmp_path: Path) -> None:
    async def test(call: Call, runtime: SubprocessRuntime) -> None:
        await runtime.write("latin1.txt", "caf\xe9\n".encode("latin-1"))
        await runtime.write("big.txt", b"x" * 2000)
        r = await call("str_replace", path="latin1.txt", old_str="caf", new_str="cafe")
        assert r.error == "tool_failed" and "not UTF-8 text" in r.content
        r = await call("str_replace", path="big.txt", old_str="xx", new_str="y")
        assert r.error == "tool_failed" and "over the 1024 byte limit" in r.content
        r = await call("bash", command='echo "$TMPDIR"')  # scratch files go to TMPDIR
        assert r.content.startswith(f"{tmp_path}\n")
        await call("view", path="big.txt")
        await call("search", pattern="x")

    with_toolbox(test, env={"TMPDIR": str(tmp_path)}, max_file_bytes=1024)
    assert list(tmp_path.iterdir()) == []


def test_writes_never_follow_a_symlink_flipped_after_the_check(tmp_path: Path) -> None:
    """A loop flips `d` between a directory in the box and a symlink to one outside while `create` and
    `str_replace` write `d/f.txt` 60 times: every write lands inside or is refused; none lands outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("old\n")
    flipper = f"while :; do rm -rf d; mkdir d; echo old > d/f.txt; rm -rf d; ln -s {outside} d; done"

    async def test(call: Call, runtime: SubprocessRuntime) -> None:
        proc = await asyncio.create_subprocess_exec("bash", "-c", flipper, cwd=str(runtime.workdir))
        try:
            results = []
            for i in range(30):
                results.append(await call("create", path="d/f.txt", content=f"new {i}\n"))
                results.append(await call("str_replace", path="d/f.txt", old_str="old", new_str="new"))
        finally:
            proc.kill()
            await proc.wait()
        assert (outside / "f.txt").read_text() == "old\n", "a write followed the symlink out of the box"
        assert sorted(outside.iterdir()) == [outside / "f.txt"]
        assert {r.error for r in results} <= {None, "path_escape", "tool_failed"}
        # Once `d` stays a directory, the same write lands inside.
        await runtime.run(["bash", "-c", "rm -rf d && mkdir d"], {})
        assert (await call("create", path="d/f.txt", content="inside\n")).error is None
        assert (runtime.workdir / "d" / "f.txt").read_text() == "inside\n"

    with_toolbox(test)
