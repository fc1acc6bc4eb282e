"""Replay recorded calls against the code in the work tree and send back what they did (stdlib only, box side).

Run as `python -I -S -B replayer.py SPEC` with the work tree as the current directory, from a fresh folder that also
holds `bootstrap.py` and `_composer_prime_values.py`. Before any code under test is imported, the process keeps a
private duplicate of its stdout for the results and points file descriptor 1 at stderr, so what the code under test
prints never mixes with them. The spec (deleted as soon as it is read) holds `pythonpath`, `nonce` and `calls` (each `target` `module:qualname`,
`args`, `kwargs`: tagged values, never the expected side, which stays with the grader; `instance` for a class
feature's method: its first argument is then the live object that instance's first call built). Each call is loaded,
made (an iterator it returns drained, at most `MAX_ITEMS` items), and answered on one line
`<nonce> {"i": n, "result" | "raised" | "error": ..., "args_after": ...}` (a result without a strict form as
`["unserialisable", why]`, which answers only a call whose gold returned None). Every
`PYTEST*` variable is dropped before the candidate is imported: nothing tells the code it is not under a test but the
absence of one (`PYTEST_CURRENT_TEST` from a parent process would let a fix switched on under tests pass).
"""

import json
import os
import sys


def target(name):
    """The callable `module:qualname` names; a method is taken from its class's namespace, unwrapped."""
    import importlib

    module, _, qualname = name.partition(":")
    owner = importlib.import_module(module)
    parts = qualname.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if parts[-1] in vars(klass):
                raw = vars(klass)[parts[-1]]
                break
        else:
            raise AttributeError(f"{owner.__qualname__} has no attribute {parts[-1]!r}")
        if isinstance(raw, (staticmethod, classmethod)):
            return raw.__func__
        if isinstance(raw, property):
            return raw.fget
        return raw
    return getattr(owner, parts[-1])


def main(spec_path):
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import bootstrap

    spec = bootstrap.read_spec(spec_path)  # deleted once read: the nonce is in no file the candidate can open
    for name in [name for name in os.environ if name.startswith("PYTEST")]:
        del os.environ[name]  # no pytest here: a process that runs under one (the env server's tests) leaks its own
    if os.environ.get("COMPOSER_PRIME_NETNS") == "isolated":
        bootstrap.loopback_up()
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    os.environ["PYTHONPATH"] = os.pathsep.join(spec["pythonpath"])
    bootstrap.add_site_packages()
    import _composer_prime_values as values

    sys.path.remove(here)
    sys.path[:0] = spec["pythonpath"]
    nonce = spec["nonce"]
    live = {}  # a class feature's instances: the candidate's own objects, built by their first call
    classes = {}  # the classes compared by class only (`values.OPAQUE`), as the candidate defines them: their names
    for name in spec.get("opaque", []):
        try:
            classes[values.resolve(name)] = name
        except BaseException:  # noqa: BLE001, S112 - a class the candidate does not define is compared as it is
            continue
    for index, call in enumerate(spec["calls"]):
        answer = {"i": index}
        try:
            function = target(call["target"])
            instance = call.get("instance")
            if instance in live:
                args = [live[instance]] + [values.load(arg) for arg in call["args"][1:]]
            else:
                args = [values.load(arg) for arg in call["args"]]
                if instance:
                    live[instance] = args[0]
            kwargs = {name: values.load(arg) for name, arg in call["kwargs"].items()}
        except BaseException as exc:  # noqa: BLE001 - the candidate's import may raise anything
            answer["error"] = f"cannot load the call: {type(exc).__name__}: {str(exc)[:200]}"
        else:
            shown = {type(obj): values.name_of(type(obj)) for obj in live.values()} | classes  # by class only
            try:
                answer["result"] = values.dump(function(*args, **kwargs), shown, drain=True, properties=True)
            except values.Unserialisable as exc:  # no answer a recorded one equals; one where the gold gave None
                answer["result"] = ["unserialisable", f"result has no strict form: {str(exc)[:200]}"]
            except BaseException as exc:  # noqa: BLE001 - what the call (or draining its iterator) raised is its answer
                try:
                    answer["raised"] = values.dump(exc, shown)
                except values.Unserialisable:
                    answer["error"] = f"raised an unnamed {type(exc).__name__}"
            try:
                answer["args_after"] = [values.dump(arg, shown, properties=True) for arg in args]
                answer["kwargs_after"] = {
                    name: values.dump(arg, shown, properties=True) for name, arg in kwargs.items()
                }
            except values.Unserialisable as exc:
                answer["error"] = f"arguments after the call have no strict form: {exc}"
        out.write(nonce + " " + json.dumps(answer) + "\n")
        out.flush()
    out.write(nonce + " done\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
