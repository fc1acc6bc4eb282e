"""The second verdict of a Feature Deletion grade: the recorded behaviour of the deleted feature, replayed.

At mining time the gold code exists: `composer_prime.mining.behaviour_plugin` records the calls the covering tests
make into the feature (arguments, then result or raised exception and the arguments after the call, in the strict
tagged format of `values`), and the miner keeps those whose replay on the gold code gives the same answer. The
expected side is stored with the task, on the host; only the calls' arguments ever enter the box.

At grading, before the task's tests are written into the box, `replay` runs `python -I -S -B replayer.py` in the
work tree through the same launcher as the suite (timeout, network namespace), as PID 1 of a PID namespace of its
own where the box allows it (so whatever it starts dies with it): a fresh process that imports the
candidate's code, makes each call and sends back tagged answers on a private duplicate of its stdout. `compare`
judges them on the grader's side with `values.same`: types and structure, never the `__eq__` of an object the
candidate built. An object that claims equality with everything, or one that reads the expected value out of the
calling test's frame, has nothing to offer here: there is no test, and its answer is a tree of its own type.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

import verifiers.v1 as vf
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from composer_prime.grading import values
from composer_prime.grading.batch import Batch, Step
from composer_prime.grading.launch import Jail, jailed, launch_argv, marks
from composer_prime.grading.stream import MAX_LINE

HERE = Path(__file__).parent
VALUES_MODULE = "_composer_prime_values"


class RecordedCall(BaseModel):
    """One call into the deleted feature, as the gold code answered it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    test: str = ""
    """The test during which it was made."""
    target: str = Field(pattern=r"^[\w.]+:[\w.]+$")
    """`module:qualname` of the function called."""
    args: list = []
    """Positional arguments at entry (tagged values; a method's first is its instance)."""
    kwargs: dict[str, list] = {}
    """Keyword arguments at entry."""
    result: list | None = None
    """What it returned (tagged), unless it raised."""
    raised: list | None = None
    """The exception it raised (tagged `exc`; only the type is compared)."""
    args_after: list = []
    """The positional arguments after the call (an in-place change is behaviour too)."""
    kwargs_after: dict[str, list] = {}
    """The keyword arguments after the call."""
    instance: str | None = Field(None, max_length=1000)
    """For a `class` feature: the name of the instance the method was called on. The replay makes the calls of one
    instance in order on one live object of the candidate's class, built by its first call (`__init__`), instead of
    loading it from the gold's attributes (`mining.behaviour.whole_chains`)."""


def spec_calls(calls: list[RecordedCall]) -> list[dict]:
    """What enters the box: the calls without their expected side."""
    return [
        {"target": c.target, "args": c.args, "kwargs": c.kwargs} | ({"instance": c.instance} if c.instance else {})
        for c in calls
    ]


def opaque_classes(calls: list[RecordedCall]) -> list[str]:
    """The classes whose instances the expected side compares by class only (`values.OPAQUE`): the replay dumps the
    candidate's instances of them the same way, whatever they hold. A name, never an expected value."""
    names: set[str] = set()

    def walk(tree) -> None:
        if isinstance(tree, list):
            if len(tree) == 3 and tree[0] == "obj" and tree[2] == values.OPAQUE and isinstance(tree[1], str):
                names.add(tree[1])
            for item in tree:
                walk(item)

    for call in calls:
        walk([call.result, call.args_after, list(call.kwargs_after.values())])
    return sorted(names)


@dataclass
class Replay:
    """A replay's steps in a `batch.Batch`: its launch, and the calls it makes."""

    launched: Step
    nonce: str
    calls: list[RecordedCall]
    jail: tuple[str, ...] | None
    wait_s: float


def replay_steps(
    batch: Batch,
    calls: list[RecordedCall],
    workdir: str,
    python: str,
    pythonpath: list[str],
    timeout_s: float,
    isolate_network: bool = True,
    jail: tuple[str, ...] | None = None,
) -> Replay:
    """Add the replay of `calls` in the box's work tree to `batch`: the launcher's files written into a fresh scratch
    folder, the launch, the folder removed. With `jail` (the host paths to hide), the replay runs in the jail
    (`composer_prime.process.jail`); `answers` counts none where it could not, when there are paths to hide."""
    scratch = f"/tmp/composer-prime-replay-{secrets.token_hex(12)}"
    nonce = secrets.token_hex(16)
    paths = [f"{workdir}/{p}".rstrip("/.") if p not in (".", "") else workdir for p in pythonpath]
    spec = {"pythonpath": paths, "nonce": nonce, "calls": spec_calls(calls), "opaque": opaque_classes(calls)}
    batch.write(f"{scratch}/replayer.py", (HERE / "replayer.py").read_bytes())
    batch.write(f"{scratch}/bootstrap.py", (HERE / "bootstrap.py").read_bytes())
    batch.write(f"{scratch}/{VALUES_MODULE}.py", (HERE / "values.py").read_bytes())
    batch.write(f"{scratch}/spec.json", json.dumps(spec).encode())
    replayer = [python, "-I", "-S", "-B", f"{scratch}/replayer.py"]
    confined = Jail((workdir, scratch), jail) if jail is not None else None
    argv = launch_argv(isolate_network, timeout_s, replayer, own_pids=True, cap=python, jail=confined)
    launched = batch.launch([*argv, f"{scratch}/spec.json"], timeout_s + 30)
    batch.run(["rm", "-rf", "--", scratch], always=True)
    return Replay(launched, nonce, calls, jail, timeout_s + 30)


async def answers(replayed: Replay) -> tuple[list[dict | None], str, bool]:
    """(one answer per call, None where none came back; the output tail; whether the replay ran as PID 1 of a
    namespace of its own, so that no process it started outlived it), once its batch ran."""
    calls, launched = replayed.calls, replayed.launched
    if launched.result.get("timed_out") or not launched.reported:
        why = launched.result.get("error") or f"the replay did not return within {replayed.wait_s:g}s"
        return [None] * len(calls), why, False
    stdout = launched.stdout
    answered = await asyncio.to_thread(read_answers, stdout, replayed.nonce, len(calls))  # off the event loop
    if replayed.jail and not jailed(stdout):  # the candidate ran where it could read the expected side
        answered = [None] * len(calls)
    contained = marks(stdout)[1]
    return answered, (stdout[-1000:] + "\n" + launched.stderr[-3000:]), contained


async def replay(
    runtime: vf.Runtime,
    calls: list[RecordedCall],
    workdir: str,
    python: str,
    pythonpath: list[str],
    timeout_s: float,
    isolate_network: bool = True,
    jail: tuple[str, ...] | None = None,
) -> tuple[list[dict | None], str, bool]:
    """Replay `calls` in the box's work tree on their own (`replay_steps`, then `answers`)."""
    batch = Batch()
    replayed = replay_steps(batch, calls, workdir, python, pythonpath, timeout_s, isolate_network, jail)
    await batch.execute(runtime, python)
    return await answers(replayed)


class Answer(BaseModel):
    """One line of the replayer's answers, as parsed on the host (any other shape is no answer)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    i: int
    result: list | None = None
    raised: list | None = None
    error: str | None = None
    args_after: list | None = None
    kwargs_after: dict[str, list] | None = None


ANSWER_CONTAINERS = 16 * values.MAX_NODES
"""Lists and objects one answer line may hold (its `[` and `{`, counted before parsing): an answer holds a few values
of at most `values.MAX_NODES` nodes each. Millions of `[]` in the 16 MiB the launcher keeps would cost hundreds of
MB once parsed (an answer bomb took grading from 241 to 859 MB)."""
ANSWERS_CONTAINERS = 8 * ANSWER_CONTAINERS
"""Lists and objects all the answer lines of one replay may hold together."""


def read_answers(stdout: str, nonce: str, count: int) -> list[dict | None]:
    """One answer per call from the replayer's stdout (None where none came back). A line that is not JSON, nested
    too deeply, of another shape, over `stream.MAX_LINE` characters or `ANSWER_CONTAINERS` lists and objects (or past
    `ANSWERS_CONTAINERS` over the lines before it) is no answer; a second answer for one call replaces the first with
    an error."""
    answers: list[dict | None] = [None] * count
    seen: set[int] = set()
    budget = ANSWERS_CONTAINERS
    for line in stdout.split("\n"):
        if not line.startswith(nonce + " {") or len(line) > MAX_LINE:
            continue
        containers = line.count("[") + line.count("{")  # an upper bound: brackets inside strings count too
        if containers > ANSWER_CONTAINERS or containers > budget:
            continue
        budget -= containers
        try:
            answer = Answer.model_validate(json.loads(line[len(nonce) + 1 :]))
        except (ValueError, RecursionError, ValidationError):
            continue
        index = answer.i
        if not 0 <= index < count:
            continue
        if index in seen:  # a second answer for one call: the first one no longer counts
            answers[index] = {"error": "answered twice"}
        else:
            seen.add(index)
            answers[index] = {name: getattr(answer, name) for name in answer.model_fields_set}  # no deep copy
    return answers


def mismatch(call: RecordedCall, answer: dict | None) -> str | None:
    """Why `answer` is not the recorded behaviour of `call` (None when it is); an answer whose tagged values are
    malformed (a wrong shape, nested too deeply) is a mismatch, never an exception."""
    try:
        return _mismatch(call, answer)
    except (ValueError, TypeError, IndexError, KeyError, AttributeError, RecursionError, OverflowError):
        return "a malformed answer (its tagged values have the wrong shape)"


def _mismatch(call: RecordedCall, answer: dict | None) -> str | None:
    if answer is None:
        return "no answer (the replay died or was killed)"
    if "error" in answer:
        return str(answer["error"])[:300]
    # What the gold answered stays out of the reason: the reason goes on the trace, and traces are kept where a later
    # rollout of the same task could read them (PRIME-RL's run folder). The candidate's own answer is its to see.
    if call.raised is not None:
        if not values.same(call.raised, answer.get("raised")):
            return f"expected to raise the recorded exception, got {_shown(answer)}"
    elif "raised" in answer:
        return f"expected the recorded result, got {_shown(answer)}"
    elif call.result != IGNORED and not values.same(call.result, answer.get("result")):
        return f"expected the recorded result, got {_shown(answer)}"
    after, kw_after = answer.get("args_after"), answer.get("kwargs_after")
    if not isinstance(after, list) or len(after) != len(call.args_after):
        return "the arguments after the call do not match"
    changed = [index for index in range(len(call.args_after)) if changed_by_gold(call, index)]
    if not all(values.same(call.args_after[i], after[i]) for i in changed):
        return "the arguments after the call differ (in-place changes)"
    if not isinstance(kw_after, dict) or set(kw_after) != set(call.kwargs_after):
        return "the keyword arguments after the call do not match"
    if not all(values.same(v, kw_after[k]) for k, v in call.kwargs_after.items() if changed_by_gold(call, k)):
        return "the keyword arguments after the call differ (in-place changes)"
    return None


IGNORED = ["none"]
"""A recorded result that is not compared: a call the gold answered with None (`Cart.add`) may answer anything (a
chainable `return self`); a raise is still a raise."""


def changed_by_gold(call: RecordedCall, where: int | str) -> bool:
    """Whether the gold changed the argument at `where` (a position or a keyword), as `values.same` tells, either way
    round: only those are compared after the call. An argument the gold left alone is the candidate's to use (an
    in-place sort no test observes); a candidate that changes one the gold changed must change it alike."""
    if isinstance(where, int):
        before = call.args[where] if where < len(call.args) else None
        after = call.args_after[where]
    else:
        before, after = call.kwargs.get(where), call.kwargs_after[where]
    return before is None or not (values.same(before, after) and values.same(after, before))


def compare(calls: list[RecordedCall], answers: list[dict | None]) -> tuple[float, list[str]]:
    """(fraction of calls answered as recorded, one line per mismatch: call index, target, why)."""
    if not calls:
        return 1.0, []
    wrong = []
    for index, (call, answer) in enumerate(zip(calls, answers, strict=True)):
        why = mismatch(call, answer)
        if why is not None:
            wrong.append(f"call {index} {call.target}: {why}")
    return (len(calls) - len(wrong)) / len(calls), wrong


def _short(tree) -> str:
    return json.dumps(tree)[:120]


def _shown(answer: dict) -> str:
    raised = answer.get("raised")
    if "raised" in answer:
        name = raised[1] if isinstance(raised, list) and len(raised) > 1 else raised
        return f"raised {json.dumps(name)[:120]}"
    return _short(answer.get("result"))
