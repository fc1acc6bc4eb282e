"""A package's environment image: the base image's Python plus the package's test dependencies, pinned, and never the
package's own code.

1. `probe` runs the base image once (no network) and reads its interpreter (`python`, else `python3`), its version,
   ABI, glibc and machine, its marker environment, and which of the box's tools it lacks (`git`, `tar`, `sha256sum`,
   `timeout`, `unshare`).
2. `resolve` evaluates the project's requirements (runtime + test extras + `pytest`) against that marker environment
   and has the host's pip download wheels for the image's platform (`--only-binary :all:`, `--python-version`,
   `--abi`, one `--platform` per manylinux tag the glibc allows): the resolved set is the pin list. A set that holds
   the package itself (a test dependency that requires it, as pytest requires pluggy) is refused: its code would be
   in the image.
3. `build` writes a Containerfile that bind-mounts the wheels during one `RUN` (so they are not a layer) and installs
   the pins, named in that line, with a pip run from its own wheel (`--no-index`: the build needs no network), then
   checks that none of the project's import names resolves in the image and that every pin is installed at its
   version. A base without `git` gets it from apt-get, the one step that needs the network; a base without the other
   tools is refused.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import InvalidMarker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from composer_prime.process.commands import run_checked_host

BOX_TOOLS = ("git", "tar", "sha256sum", "timeout", "unshare", "sh")
"""Commands the feature-deletion box and its grader run."""
PROBE = r"""
import json, os, platform, shutil, sys
tools = __TOOLS__
libc = (os.confstr("CS_GNU_LIBC_VERSION") or "").split()
print(json.dumps({
    "python": os.path.basename(sys.argv[1]),
    "version": "%d.%d" % sys.version_info[:2],
    "impl": sys.implementation.name,
    "abi": "cp%d%d" % sys.version_info[:2] if sys.implementation.name == "cpython" else "",
    "glibc": libc[1] if len(libc) == 2 and libc[0] == "glibc" else None,
    "machine": platform.machine(),
    "missing": [t for t in tools if shutil.which(t) is None],
    "apt": shutil.which("apt-get") is not None,
    "markers": {
        "implementation_name": sys.implementation.name,
        "implementation_version": platform.python_version(),
        "os_name": os.name, "platform_machine": platform.machine(), "platform_release": "",
        "platform_system": platform.system(), "platform_version": "",
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": "%d.%d" % sys.version_info[:2], "sys_platform": sys.platform,
    },
}))
""".replace("__TOOLS__", repr(BOX_TOOLS))
ALWAYS = ("pytest",)
"""Installed in every image: the miner and the grader run pytest."""
BUILD_TIMEOUT_S = 1800.0


class ImageError(Exception):
    """The image cannot be built for this package; the message names the cause and the fix."""


@dataclass(frozen=True)
class Base:
    """What the base image offers."""

    image: str
    python: str
    """`python` or `python3`: the interpreter name the tasks' test command uses."""
    version: str
    impl: str
    abi: str
    glibc: str | None
    machine: str
    missing: tuple[str, ...]
    apt: bool
    markers: dict[str, str]

    def pip_target(self) -> list[str]:
        """pip's options that download wheels for this image instead of the host."""
        if self.glibc is None:
            raise ImageError(f"base_image {self.image!r}: its C library is not glibc; manylinux wheels need glibc")
        major, minor = (int(x) for x in self.glibc.split(".")[:2])
        platforms = [f"manylinux_{major}_{m}_{self.machine}" for m in range(minor, 16, -1)]
        platforms += [f"manylinux2014_{self.machine}"]
        abis = [self.abi, "abi3", "none"] if self.abi else ["abi3", "none"]
        args = ["--only-binary", ":all:", "--python-version", self.version, "--implementation", self.impl[:2]]
        return args + [a for abi in abis for a in ("--abi", abi)] + [a for p in platforms for a in ("--platform", p)]


def engine_run(engine: str, args: list[str], timeout_s: float = 300.0, error: type[Exception] = ImageError) -> str:
    """Run the container CLI; its stdout (a failure raises `error` with the output's tail)."""
    return run_checked_host([engine, *args], error=error, timeout_s=timeout_s)


def probe(engine: str, image: str) -> Base:
    """Read the base image's interpreter and tools (one container, no network)."""
    script = 'p=$(command -v python || command -v python3) || { echo "no python"; exit 3; }; exec "$p" -c "$0" "$p"'
    try:
        out = engine_run(engine, ["run", "--rm", "--network", "none", "--entrypoint", "sh", image, "-c", script, PROBE])
    except ImageError as err:
        raise ImageError(
            f"base_image {image!r}: cannot run it here ({err}); name an image this machine has (`{engine} images`) "
            "with Python 3, or pull one first"
        ) from None
    found = json.loads(out.strip().splitlines()[-1])
    return Base(image=image, missing=tuple(found.pop("missing")), **found)


def select(requirements: list[str], base: Base, package: str) -> tuple[list[str], list[str]]:
    """The requirements that apply in the image (markers evaluated there, markers dropped), the package itself left
    out; and one note per requirement left out (unparsable, a self-reference)."""
    kept, notes = [], []
    own = canonicalize_name(package)
    for text in [*requirements, *ALWAYS]:
        try:
            requirement = Requirement(text)
        except InvalidRequirement as err:
            notes.append(f"{text!r} left out: not a requirement ({err})")
            continue
        try:
            if requirement.marker is not None and not requirement.marker.evaluate({**base.markers, "extra": ""}):
                continue
        except InvalidMarker as err:
            notes.append(f"{text!r} left out: its marker does not evaluate ({err})")
            continue
        if canonicalize_name(requirement.name) == own:
            continue  # `pkg[extra]` inside pkg's own extras: the code is never installed
        requirement.marker = None
        if str(requirement) not in kept:
            kept.append(str(requirement))
    return kept, notes


def resolve(requirements: list[str], base: Base, package: str, index_args: list[str], into: Path) -> dict[str, str]:
    """Download wheels of `requirements` and their dependencies for the image into `into/wheels`, and pip's own wheel
    into `into/pip`; the pins (canonical name -> version). Raises ImageError when the set holds the package."""
    wheels, pip_dir = into / "wheels", into / "pip"
    common = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--disable-pip-version-check",
        *base.pip_target(),
        *index_args,
    ]
    try:
        run_checked_host([*common, "-d", str(wheels), *requirements], error=ImageError, timeout_s=BUILD_TIMEOUT_S)
        run_checked_host([*common, "--no-deps", "-d", str(pip_dir), "pip"], error=ImageError, timeout_s=600.0)
    except ImageError as err:
        raise ImageError(
            f"resolving {requirements} for Python {base.version} on {base.machine} failed: {err}\nEvery test "
            "dependency needs a wheel for the image's platform (sdist-only dependencies are not built)"
        ) from None
    pins = {}
    for path in sorted(wheels.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(path.name)
        pins[str(name)] = str(version)
    own = canonicalize_name(package)
    if own in pins:
        raise ImageError(
            f"the test dependencies of {package} require {package} itself ({own}=={pins[own]} resolved among "
            f"{sorted(pins)}): its code would be in the image the agent works in, so the package cannot be mined"
        )
    return pins


def image_tag(prefix: str, name: str, version: str, base: Base, pins: dict[str, str], base_id: str) -> str:
    """`<prefix>/<name>:<version>-<hash of base image id and pins>`: the same inputs give the same tag."""
    digest = hashlib.sha256(json.dumps([base_id, base.python, sorted(pins.items())]).encode()).hexdigest()[:10]
    safe = re.sub(r"[^a-z0-9._-]+", "-", version.lower()).strip(".-") or "0"
    return f"{prefix.rstrip('/')}/{re.sub(r'[^a-z0-9._-]+', '-', name.lower())}:{safe[:80]}-{digest}"


def image_id(engine: str, image: str) -> str | None:
    """The image's id, or None when the engine has no such image."""
    done = subprocess.run(
        [engine, "image", "inspect", "--format", "{{.Id}}", image],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.stdout.strip() or None if done.returncode == 0 else None


def image_bytes(engine: str, image: str) -> int:
    return int(engine_run(engine, ["image", "inspect", "--format", "{{.Size}}", image]).strip())


def build(engine: str, tag: str, base: Base, pins: dict[str, str], into: Path, import_names: list[str]) -> None:
    """Build `tag` from the wheels under `into` (see the module docstring), then refuse it if the package's own
    import names resolve in it."""
    extra = [t for t in base.missing if t != "git"]
    if extra:
        raise ImageError(
            f"base_image {base.image!r} lacks {extra}, which the feature-deletion box runs; use a Debian-based image "
            "(python:3.x-slim has them) or add them to the base"
        )
    if "git" in base.missing and not base.apt:
        raise ImageError(f"base_image {base.image!r} lacks git and apt-get to install it; use an image with git")
    (pip_wheel,) = sorted((into / "pip").glob("pip-*.whl"))
    (into / "Containerfile").write_text(containerfile(base, pins, pip_wheel.name))
    network = [] if "git" in base.missing else ["--network", "none"]
    engine_run(
        engine,
        ["build", "-q", *network, "-t", tag, "-f", str(into / "Containerfile"), str(into)],
        timeout_s=BUILD_TIMEOUT_S,
    )
    found, dists = contents(engine, tag, base.python, import_names)
    wrong = {name: dists.get(name) for name, version in pins.items() if dists.get(name) != version}
    if found or wrong:
        engine_run(engine, ["rmi", "-f", tag])
    if found:
        raise ImageError(f"the built image can import the package's own {found}: its code would reach the agent")
    if wrong:
        raise ImageError(f"the built image does not hold the pins: installed {wrong} where {pins} were asked")


def containerfile(base: Base, pins: dict[str, str], pip_wheel: str) -> str:
    """The build: the base, git if it lacks it, then the pins installed from the bind-mounted wheels. The pins are
    written into the `RUN` line itself: the engine's layer cache keys on that text, not on the mounted files, so
    two packages with other pins never share a cached layer."""
    mount = "/tmp/composer-prime-wheels"
    lines = [f"FROM {base.image}"]
    if "git" in base.missing:  # the one networked step: a base without git (python:3.x-slim)
        lines.append(
            "RUN apt-get update -q && apt-get install -y -q --no-install-recommends git && rm -rf /var/lib/apt/lists/*"
        )
    requirements = " ".join(f"{name}=={version}" for name, version in sorted(pins.items()))
    lines.append(
        f"RUN --mount=type=bind,source=.,target={mount} PIP_BREAK_SYSTEM_PACKAGES=1 {base.python} "
        f"{mount}/pip/{pip_wheel}/pip install -q --no-index --no-cache-dir --disable-pip-version-check "
        f"--root-user-action=ignore --find-links {mount}/wheels {requirements}"
    )
    return "\n".join(lines) + "\n"


def contents(engine: str, image: str, python: str, names: list[str]) -> tuple[list[str], dict[str, str]]:
    """Which of the import `names` resolve in `image` (run from `/`, isolated mode), and its installed
    distributions (canonical name -> version)."""
    code = (
        "import importlib.metadata as m, importlib.util, json, re, sys; print(json.dumps(["
        "[n for n in sys.argv[1:] if importlib.util.find_spec(n)], "
        "{re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(): d.version for d in m.distributions() if d.metadata['Name']}]))"
    )
    out = engine_run(
        engine,
        ["run", "--rm", "--network", "none", "--workdir", "/", "--entrypoint", python, image, "-I", "-c", code, *names],
    )
    found, dists = json.loads(out.strip().splitlines()[-1])
    return found, dists
