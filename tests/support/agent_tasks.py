"""Small verifiers v1 tasks for composer-agent tests: files are written into the work directory at setup, and the
reward checks what the agent left on disk."""

from __future__ import annotations

import verifiers.v1 as vf

from tests.support.scripted_server import API_KEY_VAR


class FilesTaskData(vf.TaskData):
    files: dict[str, str] = {}
    """Work-directory-relative path -> content, written at setup."""
    expected: dict[str, str] = {}
    """Work-directory-relative path -> content the agent must leave behind."""


class FilesTask(vf.Task[FilesTaskData]):
    async def setup(self, runtime: vf.Runtime) -> None:
        for path, content in self.data.files.items():
            await runtime.write(path, content.encode())

    @vf.reward(weight=1.0)
    async def files_match(self, trace: vf.Trace, runtime: vf.Runtime) -> float:
        for path, content in self.data.expected.items():
            try:
                if (await runtime.read(path)).decode() != content:
                    return 0.0
            except Exception:  # noqa: BLE001 - a missing file is a failed task
                return 0.0
        return 1.0


def files_task(prompt: str, files: dict[str, str], expected: dict[str, str], **data: object) -> FilesTask:
    return FilesTask(FilesTaskData(idx=0, name="files", prompt=prompt, files=files, expected=expected, **data))


def scripted_agent(base_url: str, model: str, harness: dict | None = None, **agent_config: object) -> vf.Agent:
    """A composer-agent on the subprocess runtime whose model is the scripted server at `base_url`."""
    return vf.make_agent(
        vf.AgentConfig(
            model=model,
            harness={"id": "composer-agent", **(harness or {})},
            runtime=vf.SubprocessConfig(),
            client=vf.EvalClientConfig(base_url=base_url, api_key_var=API_KEY_VAR),
            **agent_config,
        )
    )
