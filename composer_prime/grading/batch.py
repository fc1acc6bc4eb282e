"""Grading steps batched into one runtime call: a plan the grading driver (`driver.py`) runs in the box, in order.

Every `runtime.run`, `read` and `write` on a docker or podman box is a `podman exec` of 0.1-0.3 s, and a grading made
about 40 of them. A `Batch` collects steps (commands, file writes and reads, launches of the trusted launcher, the
changed files of a listing) and `execute` sends them as one plan: one `write` of the plan into a fresh scratch folder
and one `run` of the driver (`python -I -S -B -c <driver source> <plan>`, the grading interpreter: the grader box's
own, or the one the task names on the subprocess runtime, as for the launcher's capping stage). Each step's result
comes back on its own line, marked with a token drawn for the plan; a step that did not report (the driver killed, a
plan that stopped at a failed `check` step) reads as `{"skipped": true}` or raises where the caller needs it.

The order of the steps is the order the grader adds them: the driver runs them one after the other, each launch a
fresh interpreter as before, so batching changes how many calls a grading makes, not what runs in what order.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import verifiers.v1 as vf

DRIVER = Path(__file__).with_name("driver.py")
SLACK_S = 60.0
"""Seconds the host waits for the driver beyond the sum of its launches' own limits."""


@dataclass
class Step:
    """One step of a plan; `result` is filled in by `Batch.execute`."""

    spec: dict
    result: dict = field(default_factory=dict)

    @property
    def exit(self) -> int | None:
        return self.result.get("exit")

    @property
    def stdout(self) -> str:
        return base64.b64decode(self.result.get("stdout", "")).decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return base64.b64decode(self.result.get("stderr", "")).decode("utf-8", "replace")

    @property
    def data(self) -> bytes:
        return base64.b64decode(self.result.get("data", ""))

    @property
    def reported(self) -> bool:
        return bool(self.result) and not self.result.get("skipped")

    def checked(self, what: str) -> Step:
        """This step, or `vf.SandboxError` naming `what` when it failed or did not run."""
        if not self.reported or self.exit != 0:
            detail = self.result.get("error") or (self.stderr or self.stdout).strip()[-500:]
            status = "did not run" if not self.reported else f"exit {self.exit}"
            raise vf.SandboxError(f"{what} failed ({status}): {detail}")
        return self


class Batch:
    """Steps for one run of the grading driver."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.wait_s = 0.0

    def _add(self, spec: dict, check: str = "", always: bool = False) -> Step:
        """`check`: what the step does, for the error raised when it fails (and the plan stops there)."""
        step = Step({**spec, **({"check": check} if check else {}), **({"always": True} if always else {})})
        self.steps.append(step)
        return step

    def run(self, argv: list[str], check: str = "", always: bool = False) -> Step:
        return self._add({"op": "run", "argv": argv}, check, always)

    def write(self, path: str, data: bytes) -> Step:
        spec = {"op": "write", "path": path, "data": base64.b64encode(data).decode("ascii")}
        return self._add(spec, check=f"grading: writing {path}")

    def read(self, path: str, max_bytes: int) -> Step:
        return self._add({"op": "read", "path": path, "max": max_bytes})

    def launch(self, argv: list[str], wait_s: float) -> Step:
        """`argv` (a `launch.launch_argv` line), killed with every process under it past `wait_s` seconds."""
        self.wait_s += wait_s
        return self._add({"op": "launch", "argv": argv, "wait": wait_s})

    def reap_unless_own_pids(self, launched: Step, argv: list[str]) -> Step:
        """`argv` (the reaper), run only when `launched` had no PID namespace of its own."""
        return self._add({"op": "run", "argv": argv, "unless_own_pids": self.steps.index(launched)})

    def changed(self, listing: Step, manifest: dict[str, str], max_bytes: int, budget: int) -> Step:
        """The listed regular files whose digest does not start with `manifest`'s: size, and bytes up to
        `max_bytes` within `budget` bytes in all (`files`: path -> {size, data | skipped} or {error})."""
        spec = {"op": "changed", "listing": self.steps.index(listing), "manifest": manifest}
        return self._add({**spec, "max": max_bytes, "budget": budget})

    async def execute(self, runtime: vf.Runtime, python: str) -> None:
        """Run the steps in the box (two runtime calls); every step's `result` is filled in. `vf.SandboxError` when a
        step added with `check` failed (naming it), or the driver did not return in time."""
        if not self.steps:
            return
        token = secrets.token_hex(16)
        plan = f"/tmp/composer-prime-plan-{secrets.token_hex(12)}.json"
        steps = [step.spec for step in self.steps]
        await runtime.write(plan, json.dumps({"token": token, "steps": steps}).encode())
        argv = [python, "-I", "-S", "-B", "-c", DRIVER.read_text(), plan]
        try:
            result = await asyncio.wait_for(runtime.run(argv, {}), self.wait_s + SLACK_S)
        except TimeoutError:
            await runtime.run(["rm", "-f", "--", plan], {})
            raise vf.SandboxError(f"the grading driver did not return within {self.wait_s + SLACK_S:g}s") from None
        seen = 0
        for line in (result.stdout or "").split("\n"):
            if not line.startswith(token + " "):
                continue
            reported = json.loads(line[len(token) + 1 :])
            index = reported.pop("i")
            if index == seen < len(self.steps):
                self.steps[index].result = reported
                seen += 1
        if seen < len(self.steps):
            tail = (result.stderr or "").strip()[-300:]
            for step in self.steps[seen:]:
                step.result = {
                    "skipped": True,
                    "error": f"the grading driver stopped (exit {result.exit_code}): {tail}",
                }
        for step in self.steps:
            if step.spec.get("check"):  # the first that failed or did not run raises
                step.checked(step.spec["check"])
