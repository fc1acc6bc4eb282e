"""Image mode for real: feature-deletion and swe-gym on verifiers' podman runtime, the reaper and the red-team attacks
inside a container.

The image is built locally by `.ci/image` (Debian 12 from its packages with mmdebstrap: python3 with pytest, git,
bash, coreutils, procps, util-linux) and named by COMPOSER_PRIME_IMAGE; podman runs with the containers.conf that
script writes (CONTAINERS_CONF: no default ulimits, runc). swe-gym's image adds the toy project at `/testbed`, with
its whole history (the fix commit, a tag and a branch included), as SWE-Gym's images carry theirs. Without
COMPOSER_PRIME_IMAGE every test here skips; `.ci/image` runs them.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import shutil
import subprocess

import pytest
import tenacity
import verifiers.v1 as vf
from swe_gym.taskset import SWEGymTaskset, SWEGymTasksetConfig
from verifiers.v1.runtimes import make_runtime

from composer_prime.process.reaper import box_argv, new_token, reap_box
from tests.support.featdel_repo import APPLY_DISCOUNT, mined_shop
from tests.support.scripted_server import API_KEY_VAR, ScriptedModelServer, tool
from tests.support.swegym_repo import FIX_SECRET, build_toy_instance, local_task_config, write_jsonl

IMAGE = os.environ.get("COMPOSER_PRIME_IMAGE", "")
pytestmark = pytest.mark.skipif(
    not IMAGE or shutil.which("podman") is None,
    reason="image mode needs podman and COMPOSER_PRIME_IMAGE, a local image built by .ci/image (which runs these)",
)
TIMEOUT_S = 30.0


def podman(*args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(["podman", *args], input=stdin, capture_output=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stdout.decode()


@tenacity.retry(stop=tenacity.stop_after_attempt(6), wait=tenacity.wait_fixed(2), reraise=True)
def remove_image(tag: str) -> None:
    """`podman rmi -f`, again while a box of the image is still being removed (grader boxes go in a thread: rmi then
    fails with "container ... does not exist in database")."""
    podman("rmi", "-f", tag)


@pytest.fixture(scope="module")
def featdel_task(tmp_path_factory: pytest.TempPathFactory) -> vf.Task:
    from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

    _, tasks_file, _ = mined_shop(tmp_path_factory)
    config = resolve_env_config(
        {"taskset": {"id": "feature-deletion", "tasks": str(tasks_file), "task": {"test_timeout_s": TIMEOUT_S}}}
    )
    return {task.data.name: task for task in load_taskset(config.taskset)}[APPLY_DISCOUNT]


@pytest.fixture(scope="module")
def swegym_image(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The toy instance in image mode (an image holding the project's full clone at /testbed), and the toy."""
    root = tmp_path_factory.mktemp("image-swegym")
    toy = build_toy_instance(root / "src")
    subprocess.run(["git", "-C", str(toy.repo), "checkout", "-q", toy.base_commit], check=True, timeout=60)
    tag = f"localhost/composer-prime-swegym-toy:{new_token()}"
    (root / "Containerfile").write_text(f"FROM {IMAGE}\nCOPY src/calc /testbed\n")
    podman("build", "-q", "-t", tag, "-f", str(root / "Containerfile"), str(root))
    rows = write_jsonl(root / "rows.jsonl", [toy.row])
    # the oracle is recorded as `swe-gym-prepare` records it, in local mode on this host, and read by image mode
    local = {**local_task_config(root / "cache", toy.repo), "test_timeout_s": TIMEOUT_S}
    (recorder,) = SWEGymTaskset(SWEGymTasksetConfig(data_file=rows, mode="local", task=local)).load()
    assert recorder.oracle().usable
    config = SWEGymTasksetConfig(
        data_file=rows,
        mode="image",
        image_template=tag,
        # the box has no network (`rollout_network` default): verifiers' network cut, as the TOMLs train
        task={"test_timeout_s": TIMEOUT_S, "oracle_dir": str(root / "cache" / "oracles")},
    )
    (task,) = SWEGymTaskset(config).load()
    yield task, toy
    remove_image(tag)


@pytest.fixture(scope="module")
def swegym_task(swegym_image) -> vf.Task:  # type: ignore[no-untyped-def]
    return swegym_image[0]


def trace_for(task: vf.Task, runtime_config: vf.RuntimeConfig) -> vf.Trace:
    return vf.Trace(
        task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=vf.AgentInfo(config=vf.AgentConfig(runtime=runtime_config), name="validate", trainable=False),
    )


def in_box(task: vf.Task, check, timeout_s: float = 300):  # type: ignore[no-untyped-def]
    """Set `task` up in a fresh podman container, run `check(runtime, trace)`, stop the container."""
    config = vf.PodmanConfig(image=task.data.image or IMAGE, workdir=task.data.workdir)

    async def go():  # type: ignore[no-untyped-def]
        runtime = make_runtime(config, name=f"image-{new_token()}")
        await runtime.start()
        trace = trace_for(task, config)
        try:
            hook_args = {"trace": trace, "runtime": runtime}  # verifiers passes a hook's arguments by name
            await task.setup(**{k: v for k, v in hook_args.items() if k in inspect.signature(task.setup).parameters})
            return await check(runtime, trace)
        finally:
            await runtime.stop()

    return asyncio.run(asyncio.wait_for(go(), timeout_s))


@pytest.mark.parametrize("env_name", ["feature-deletion", "swe-gym"])
def test_gold_patch_scores_one_and_untouched_zero_in_a_container(env_name, featdel_task, swegym_task):
    task = featdel_task if env_name == "feature-deletion" else swegym_task

    async def untouched(runtime, trace):  # type: ignore[no-untyped-def]
        workdir = (await runtime.run(["pwd", "-P"], {})).stdout.strip()
        await task.finalize(trace, runtime)
        await task.score(trace, runtime)
        return workdir, trace

    workdir, trace = in_box(task, untouched)
    assert workdir == ("/testbed" if env_name == "swe-gym" else "/app")
    assert trace.reward == 0.0 and trace.metrics["pass_to_pass"] == 1.0, trace.info.get("grading")
    assert trace.info["grading"]["grader_box"] is True  # graded in a second container, not the agent's
    assert trace.info["grading"]["error"] is None and trace.info["grading"]["void"] == []
    assert trace.metrics["network_isolated"] == 1.0  # `unshare -n` works as root inside the container

    async def gold(runtime, trace):  # type: ignore[no-untyped-def]
        return await task.validate(runtime)

    assert in_box(task, gold) is True


MAX_PODMAN_COMMANDS = 14
"""`podman` commands one feature-deletion grading makes (the grader box's start and removal included): the grading
driver's two plans of two each, the rollout's end, the tree's packing, transfer and unpacking, the interpreter
check; 38 before the driver, one per step."""


def test_a_grading_makes_a_bounded_number_of_podman_commands(featdel_task, monkeypatch):
    """Each `podman exec` costs 0.13-0.3 s: the gold patch's grading in a container (replay, listing, owned test
    files, canaries, suite, interpreter check in the grader box) makes at most `MAX_PODMAN_COMMANDS` of them."""
    from verifiers.v1.runtimes import container

    commands: list[str] = []
    for name in ("_run_host", "_communicate_host"):
        method = getattr(container.ContainerRuntime, name)

        def counted(method=method):  # type: ignore[no-untyped-def]
            async def call(self, *args, **kwargs):  # type: ignore[no-untyped-def]
                commands.append(" ".join(args[:2]))
                return await method(self, *args, **kwargs)

            return call

        monkeypatch.setattr(container.ContainerRuntime, name, counted())
    task = featdel_task

    async def gold(runtime, trace):  # type: ignore[no-untyped-def]
        await runtime.write("gold.patch", task.data.mined.gold_patch.encode())
        assert (await runtime.run(["git", "apply", "gold.patch"], {})).exit_code == 0
        await runtime.run(["rm", "-f", "gold.patch"], {})
        commands.clear()
        return await task.grade(runtime)

    grade = in_box(task, gold)
    assert grade.solved and grade.grader_box and grade.replay_calls > 0, (grade.error, grade.void)
    assert len(commands) <= MAX_PODMAN_COMMANDS, commands


# The agent is root in its container: it appends a line to the image's own pytest and replaces `sha256sum` with one
# that reports that file's digest from before the change, so the in-box interpreter check sees nothing.
PLANT = r"""
set -e
init=$(python3 -I -S -c 'import sys, site; sys.path[:0] = site.getsitepackages(); import _pytest; print(_pytest.__file__)')
cp "$init" /root/pytest-init.orig
echo 'open("/tmp/agent-planted-ran", "w").write("AGENT-PLANTED-IN-THE-GRADING-INTERPRETER")' >> "$init"
real=$(command -v sha256sum)
cp "$real" /root/sha256sum.real
cat > "$real" <<END
#!/bin/bash
[ \$# -eq 0 ] && exec /root/sha256sum.real
for f in "\$@"; do
  if [ "\$f" = "$init" ]; then echo "\$(/root/sha256sum.real < /root/pytest-init.orig | cut -d' ' -f1)  \$f"
  else /root/sha256sum.real "\$f"; fi
done
END
"""


def test_the_grading_interpreter_is_one_the_agent_never_reached(featdel_task):
    """An agent that rewrites the image's pytest in its container (and fools the in-box check) reaches grading only
    without the grader box; with it (the default) the suite runs in a second container from the image."""
    from feature_deletion.taskset import _interpreters

    from composer_prime import grading
    from composer_prime.grading import interpreter

    task = featdel_task

    async def planted(runtime, trace):  # type: ignore[no-untyped-def]
        await runtime.write("gold.patch", task.data.mined.gold_patch.encode())
        assert (await runtime.run(["git", "apply", "gold.patch"], {})).exit_code == 0
        await runtime.run(["rm", "-f", "gold.patch"], {})
        done = await runtime.run(["bash", "-c", PLANT], {})
        assert done.exit_code == 0, done.stderr
        before = _interpreters[runtime]

        async def check(where) -> list[str]:  # type: ignore[no-untyped-def]
            return interpreter.changes(before, await interpreter.fingerprint(where, task.python))

        suite = task.suite().model_copy(update={"grader_box": False})
        calls = task.data.mined.behaviour
        inside = await grading.grade(runtime, suite, task.baseline(), calls=calls, check=check)
        ran_inside = (await runtime.run(["cat", "/tmp/agent-planted-ran"], {})).stdout
        await runtime.run(["rm", "-f", "/tmp/agent-planted-ran"], {})
        boxed = await task.grade(runtime)  # the grader box is another container: its /tmp is not this box's
        ran_boxed = (await runtime.run(["cat", "/tmp/agent-planted-ran"], {})).stdout
        return inside, ran_inside, boxed, ran_boxed

    inside, ran_inside, boxed, ran_boxed = in_box(task, planted)
    # potent: without the grader box the agent's pytest ran the suite and the in-box check saw no change
    assert not inside.grader_box and inside.void == [], inside.void
    assert ran_inside == "AGENT-PLANTED-IN-THE-GRADING-INTERPRETER"
    assert boxed.grader_box and boxed.solved and boxed.void == [], boxed.info()
    assert ran_boxed == "", "the planted line ran in the agent's box at grading"


def test_swe_gym_image_box_holds_no_future(swegym_task):
    """The image's clone carries the fix commit, its tag and branch; setup leaves one commit of base_commit's tree."""

    async def history(runtime, trace):  # type: ignore[no-untyped-def]
        script = f"git rev-list --all | wc -l; git tag | wc -l; git branch | wc -l; git grep -c '{FIX_SECRET}' $(git rev-list --all) | wc -l; git cat-file --batch-all-objects --batch | grep -c '{FIX_SECRET}' || true"
        return (await runtime.run(["sh", "-c", script], {})).stdout.split()

    assert in_box(swegym_task, history) == ["1", "0", "1", "0", "0"]


ESCAPES = {
    "background": "sleep 301 >/dev/null 2>&1 & echo $! >> /tmp/pids",
    "setsid": "setsid sh -c 'echo $$ >> /tmp/pids; exec sleep 303' >/dev/null 2>&1 < /dev/null &",
    "double_fork": "( ( sh -c 'echo $$ >> /tmp/pids; exec sleep 304' & ) & ) >/dev/null 2>&1",
    "env_i_cd_root_setsid": (
        "( (cd / && exec setsid env -i sh -c 'echo $$ >> /tmp/pids; exec sleep 305') & ) >/dev/null 2>&1 < /dev/null"
    ),
}
ALIVE = 'n=0; for p in $(cat /tmp/pids); do s=$(cut -d")" -f2 /proc/$p/stat 2>/dev/null | cut -d" " -f2); case "$s" in ""|Z|X) ;; *) n=$((n+1));; esac; done; echo $n'


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_reaper_kills_escaped_processes_inside_a_container(name):
    config = vf.PodmanConfig(image=IMAGE)

    async def go():  # type: ignore[no-untyped-def]
        runtime = make_runtime(config, name=f"reaper-{new_token()}")
        await runtime.start()
        token = new_token()
        try:
            result = await runtime.run(box_argv(["bash", "-c", ESCAPES[name]], token), {})
            assert result.exit_code == 0, result
            await asyncio.sleep(0.5)
            before = (await runtime.run(["sh", "-c", ALIVE], {})).stdout.strip()
            workdir = (await runtime.run(["pwd", "-P"], {})).stdout.strip()
            killed = await reap_box(runtime, workdir, token)
            after = (await runtime.run(["sh", "-c", ALIVE], {})).stdout.strip()
            return before, killed, after
        finally:
            await runtime.stop()

    before, killed, after = asyncio.run(asyncio.wait_for(go(), 120))
    assert before == "1" and killed >= 1 and after == "0"


SHED_TAGS = "( ulimit -R 4; cd / && exec setsid env -i sh -c 'echo $$ >> /tmp/pids; exec sleep 306' ) >/dev/null 2>&1 < /dev/null &"
"""An escape the reaper cannot see: no token, no work directory, no rlimit tag, not a descendant of the command."""


@pytest.mark.parametrize("reaper_only", [False, True], ids=["container-namespace", "reaper-only"])
def test_rollout_end_kills_what_shed_every_tag_inside_a_container(reaper_only, caplog):
    """`end_rollout` in a podman box: the container is the rollout's PID namespace (podman refuses `unshare --pid`),
    so every process but its PID 1 dies, the tag-shedding one included; the reaper alone misses that one."""
    from composer_prime.grading import runtime as grading_runtime

    config = vf.PodmanConfig(image=IMAGE)

    async def go():  # type: ignore[no-untyped-def]
        runtime = make_runtime(config, name=f"pidns-{new_token()}")
        await runtime.start()
        try:
            await grading_runtime.isolate_box(runtime, namespace=not reaper_only)
            for command in (ESCAPES["env_i_cd_root_setsid"], SHED_TAGS):
                assert (await runtime.run(["bash", "-c", command], {})).exit_code == 0
            await asyncio.sleep(0.5)
            before = (await runtime.run(["sh", "-c", ALIVE], {})).stdout.strip()
            ended = await grading_runtime.end_rollout(runtime)
            after = (await runtime.run(["sh", "-c", ALIVE], {})).stdout.strip()
            return before, ended, after
        finally:
            await runtime.stop()

    before, ended, after = asyncio.run(asyncio.wait_for(go(), 120))
    assert before == "2"
    if reaper_only:
        assert ended.isolation == "reaper" and after == "2", ended  # untagged: nothing for the reaper to find
    else:
        assert ended.isolation == "container" and ended.killed >= 2 and after == "0", ended
        assert "no PID namespace" not in caplog.text  # the container's namespace is one: nothing to warn about


def red_team_cases() -> list[tuple[str, str]]:
    from tests.e2e.grading.test_reward_hacks import ATTACKS, SWE_GYM_ONLY

    return [
        (env, attack)
        for env in ("feature-deletion", "swe-gym")
        for attack in sorted(ATTACKS)
        if env == "swe-gym" or attack not in SWE_GYM_ONLY
    ]


def image_rollout(task: vf.Task, steps: list) -> vf.Trace:  # type: ignore[type-arg]
    with ScriptedModelServer([*steps, tool("finish", message="done")]) as server:
        agent = vf.make_agent(
            vf.AgentConfig(
                model=server.model,
                harness={"id": "composer-agent"},
                runtime=vf.PodmanConfig(image=IMAGE),  # a task's own image (swe-gym's) takes precedence
                client=vf.EvalClientConfig(base_url=server.base_url, api_key_var=API_KEY_VAR),
            )
        )
        trace = asyncio.run(asyncio.wait_for(agent.run(task), 300))
    assert trace.ok, trace.errors
    return trace


@pytest.fixture(scope="module")
def red_team_envs(featdel_task, swegym_image):  # type: ignore[no-untyped-def]
    """The red-team suite's two environments (`attack_envs`), on the image-mode tasks."""
    from tests.e2e.grading.test_reward_hacks import attack_envs

    return attack_envs(featdel_task, *swegym_image)


@pytest.mark.parametrize("env_name", ["feature-deletion", "swe-gym"])
def test_honest_fix_scores_one_in_a_container(red_team_envs, env_name):
    env = red_team_envs[env_name]
    trace = image_rollout(env.task, env.honest)
    assert trace.reward == 1.0, json.dumps(trace.info["grading"])[:3000]
    # podman drops CAP_SYS_ADMIN (`unshare --pid` is refused): the container's own PID namespace ends the rollout
    assert trace.info["grading"]["isolation"] == "container" and trace.metrics["process_isolated"] == 1.0


@pytest.mark.parametrize(("env_name", "attack"), red_team_cases())
def test_attack_scores_zero_in_a_container(red_team_envs, env_name, attack):
    from tests.e2e.grading.test_reward_hacks import ATTACKS

    env = red_team_envs[env_name]
    trace = image_rollout(env.task, ATTACKS[attack](env))
    assert trace.reward == 0.0, json.dumps(trace.info["grading"])[:3000]
    assert trace.info["grading"]["isolation"] == "container", trace.info["grading"]["isolation_note"]


# What an agent about to fail leaves in its tree to crash grading (docs/grading.md, "Never a crash"), in the agent's
# container; `{owned}` and `{canaries}` are the task's owned test paths and their canary names.
HOSTILE = {
    "in-the-way": r"""
for f in {owned}; do rm -f "$f"; mkdir -p "$f"; echo x > "$f/inner.txt"; done
for f in {canaries}; do mkdir -p "$f"; done
mkfifo shop/pipe.py; ln -s / shop/to_root; ln -s loop_b loop_a; ln -s loop_a loop_b
""",
    "path-over-PATH_MAX": r"""
python3 -c 'import os; [(os.mkdir("d" * 200), os.chdir("d" * 200)) for _ in range(24)]; open("deep.py", "w").close()'
""",
    "32-MiB-to-the-streams": r"""
cat >> shop/pricing.py <<'END'
import os as _os, stat as _stat
for _fd in range(1, 64):
    try:
        if _stat.S_ISFIFO(_os.fstat(_fd).st_mode):
            [_os.write(_fd, b"x" * (1 << 20)) for _ in range(32)]
    except OSError:
        pass
END
""",
}


@pytest.mark.parametrize("hazard", sorted(HOSTILE))
def test_hostile_trees_grade_in_a_container(featdel_task, hazard):
    """A grade comes back from the grader box whatever the agent left: what stands where grading writes is removed
    first (the untouched tree's grade), a path the copy cannot carry voids, and output over the capping stage's
    bound voids with its reason."""
    from composer_prime.grading.canaries import WORDS

    owned = sorted(featdel_task.data.mined.test_files)
    canaries = [f"{path[:-3]}_{word}.py" for path in owned if path.endswith(".py") for word in WORDS]
    script = HOSTILE[hazard].replace("{owned}", " ".join(owned)).replace("{canaries}", " ".join(canaries))

    async def plant_and_score(runtime, trace):  # type: ignore[no-untyped-def]
        planted = await runtime.run(["sh", "-c", script], {})
        assert planted.exit_code == 0 or hazard == "path-over-PATH_MAX", planted.stderr
        await featdel_task.finalize(trace, runtime)
        await featdel_task.score(trace, runtime)
        return trace

    trace = in_box(featdel_task, plant_and_score)
    grading = trace.info["grading"]
    assert trace.reward == 0.0, grading
    if hazard == "in-the-way":
        assert grading["grader_box"] is True
        assert grading["error"] is None and grading["void"] == [], grading
        assert trace.metrics["pass_to_pass"] == 1.0, grading["pass_to_pass_failed"]
    elif hazard == "path-over-PATH_MAX":
        assert any("unpacking the tree in the grader box failed" in reason for reason in grading["void"]), grading
    else:
        assert grading["grader_box"] is True
        assert any("over the 16777216 byte cap" in reason for reason in grading["void"]), grading


def test_the_grader_box_keeps_the_tasksets_environment_not_the_rollouts_markers():
    """swe-gym puts the image's conda env on PATH through the runtime's environment: the grader box runs its commands
    with it too (the suite must find the same interpreter), but not the rollout's reaper token or namespace."""
    from composer_prime.grading.private_copy import grader_box_copy
    from composer_prime.process.pidns import NS_VAR
    from composer_prime.process.reaper import BOX_VAR

    config = vf.PodmanConfig(image=IMAGE, workdir="/app")

    async def go():  # type: ignore[no-untyped-def]
        runtime = make_runtime(config, name=f"image-{new_token()}")
        runtime.env = {"COMPOSER_TASK_MARK": "kept", BOX_VAR: new_token(), NS_VAR: "1"}
        await runtime.start()
        try:
            await runtime.write("pkg/mod.py", b"X = 1\n")
            view = await grader_box_copy(runtime, "python3")
            try:
                probe = 'echo "$COMPOSER_TASK_MARK|${COMPOSER_BOX:-none}|${COMPOSER_PIDNS:-none}"; cat pkg/mod.py'
                return (await view.run(["sh", "-c", probe], {})).stdout
            finally:
                await view.remove()
        finally:
            await runtime.stop()

    assert asyncio.run(asyncio.wait_for(go(), 300)).splitlines() == ["kept|none|none", "X = 1"]


def test_feature_deletion_runs_each_task_in_its_rows_image(tmp_path, tmp_path_factory):
    """A corpus row names its environment image (mine-corpus): the task runs there, not in the runtime's configured
    image, as swe-gym's instances run in theirs. The row's image carries a marker the runtime's image lacks."""
    from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

    _, tasks_file, _ = mined_shop(tmp_path_factory)
    marker = f"row-image-{new_token()}"
    tag = f"localhost/composer-prime-featdel-row:{new_token()}"
    (tmp_path / "marker").write_text(marker + "\n")
    (tmp_path / "Containerfile").write_text(f"FROM {IMAGE}\nCOPY marker /etc/composer-row-image\n")
    podman("build", "-q", "-t", tag, "-f", str(tmp_path / "Containerfile"), str(tmp_path))
    try:
        rows = [json.loads(line) for line in tasks_file.read_text().splitlines() if line.strip()]
        corpus = tmp_path / "corpus"
        corpus.mkdir()
        for row in rows:
            shutil.copy(tasks_file.parent / row["base"], corpus / row["base"])
        (corpus / "tasks.jsonl").write_text("".join(json.dumps({**row, "image": tag}) + "\n" for row in rows))
        # the row's box has no network (`rollout_network` default): verifiers' network cut, whose helper image
        # .ci/image builds from Debian under the tag verifiers looks for
        config = resolve_env_config({"taskset": {"id": "feature-deletion", "tasks": str(corpus / "tasks.jsonl")}})
        task = {t.data.name: t for t in load_taskset(config.taskset)}[APPLY_DISCOUNT]
        assert task.data.image == tag
        script = [tool("bash", command="cat /etc/composer-row-image || echo no-marker"), tool("finish", message="x")]
        with ScriptedModelServer(script) as server:
            agent = vf.make_agent(
                vf.AgentConfig(
                    model=server.model,
                    harness={"id": "composer-agent"},
                    runtime=vf.PodmanConfig(image=IMAGE),
                    client=vf.EvalClientConfig(base_url=server.base_url, api_key_var=API_KEY_VAR),
                )
            )
            trace = asyncio.run(asyncio.wait_for(agent.run(task), 300))
        assert trace.ok, trace.errors
        assert marker in json.dumps(server.requests[1]["messages"])
        assert trace.reward == 0.0  # the feature is still deleted: graded, in the row's image, as unsolved
    finally:
        remove_image(tag)
