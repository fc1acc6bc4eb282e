"""One package of a corpus, start to finish: fetch, image, mine in the image, validate each task in fresh boxes.

`mine_package` runs in a worker process of its own (`python -m composer_prime.corpus.package JOB.json`, started by
`command.py`), so that a crash, the miner's runtime hook and its scratch folder stay with one package. It writes,
under `OUT/packages/<name>-<version>/`:

    mined.jsonl, mined.jsonl.skipped.json   the miner's own files (it resumes from them)
    mined.jsonl.<fingerprint>.tar.gz         the repository state the rows' `base` names
    validated.jsonl                          one verdict per validated task (validation resumes from it)
    tasks.jsonl                              the kept rows, each with `image` set
    package.json                             name, version, source, license, image, image_bytes, report: last,
                                             atomically; its presence means the package is complete
    mine.log                                 every progress line

A deterministic failure (the sdist cannot be fetched, the test dependencies cannot be resolved or hold the package,
no test passes at baseline) is complete too: package.json records it in `report.error` with an empty tasks.jsonl,
and `retry_failed` mines it again. Anything else (a container that would not start, a kill) leaves no package.json.
Events for the progress display go to stdout as JSON lines; the log lines go to mine.log.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from composer_prime.atomic import write_atomic
from composer_prime.corpus import images, sources, testsuite
from composer_prime.corpus.config import PACKAGE_FILE, CorpusConfig, GitSource

TASKS_FILE = "tasks.jsonl"
MINED_FILE = "mined.jsonl"
VERDICTS_FILE = "validated.jsonl"
LOG_FILE = "mine.log"


class PackageFailed(Exception):
    """A deterministic failure: recorded in package.json's report, retried only with `retry_failed`."""


def emit(**event: object) -> None:
    print(json.dumps(event), flush=True)


def mine_package(config: CorpusConfig, job: dict, base: images.Base) -> dict:
    """Mine one package into its folder (see the module docstring); the package.json written, or raises."""
    folder = Path(job["folder"])
    folder.mkdir(parents=True, exist_ok=True)
    log_handle = (folder / LOG_FILE).open("a", encoding="utf-8")

    def log(line: str) -> None:
        log_handle.write(f"{time.strftime('%H:%M:%S')} {line}\n")
        log_handle.flush()
        if line.startswith("candidates: ") and " feature(s) exercised" in line:
            emit(total=int(line.split()[1]))
        elif line.startswith("[") and "/" in line.split("]", 1)[0]:
            emit(done=int(line[1:].split("/", 1)[0]))

    seconds: dict[str, float] = {}
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="composer-prime-corpus-"))
    report: dict = {"error": None}
    record = {
        "name": job["name"],
        "version": job["version"],
        "source": job["source"],
        "license": None,
        "image": None,
        "image_bytes": None,
    }
    try:
        try:
            tree, meta = _fetch(config, job, scratch, seconds, log)
            record["license"] = meta.license  # recorded whatever follows: the card names it even for a refusal
            if not testsuite.test_files(tree):  # looked for before any image is built
                tree = _release_repository(job, tree, scratch, log)
            tag, pins = _image(config, job, base, tree, meta, scratch, seconds, log)
            record["image"], record["image_bytes"] = tag, images.image_bytes(config.runtime, tag)
            report |= {"python": base.version, "base_image": base.image, "pins": pins}
            report["inferred_requires"] = job.get("inferred_requires", [])
            report["inferred_dropped"] = job.get("inferred_dropped", [])
            report |= _mine(config, job, folder, tree, tag, base, scratch, seconds, log)
        except (sources.SourceError, images.ImageError, PackageFailed) as exc:
            report["error"] = str(exc)
            log(f"failed: {exc}")
        image = record["image"]
        report |= _validate(config, folder, image, base.python, seconds, log) if image else {"kept": 0}
        seconds["total"] = round(time.monotonic() - started, 1)
        report["seconds"] = seconds
        report["seconds_per_task"] = round(seconds["total"] / report["kept"], 1) if report["kept"] else None
        if not (folder / TASKS_FILE).exists():
            write_atomic(folder / TASKS_FILE, "")
        result = {**record, "report": report}
        write_atomic(folder / PACKAGE_FILE, json.dumps(result, indent=1))  # last: the package is complete
        log(f"done: {report['kept']} task(s) kept" + (f"; error: {report['error']}" if report["error"] else ""))
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        log_handle.close()


def _fetch(config: CorpusConfig, job: dict, scratch: Path, seconds: dict, log) -> tuple[Path, sources.Metadata]:  # type: ignore[no-untyped-def]
    emit(phase="fetch")
    began = time.monotonic()
    if "spec" in job:
        log(f"fetch: {job['spec']} (sdist from find_links / index, nothing built)")
        tree = sources.fetch_sdist(job["spec"], scratch / "source", config.index_url, config.find_links)
    else:
        git = GitSource(**job["git"])
        log(f"fetch: {git.url} at {git.ref} (git fetch)")
        tree = sources.fetch_git(git.url, git.ref, scratch / "source", Path(job["folder"]).name)
    meta = sources.read_metadata(tree, job["name"], job["version"])
    seconds["fetch"] = round(time.monotonic() - began, 1)
    from composer_prime.corpus.licenses import classify

    log(
        f"metadata: {meta.name} {meta.version}, license {classify(meta.license).license}, {len(meta.requires)} runtime and "
        f"{len(meta.test_requires)} test requirement(s)"
    )
    return tree, meta


def _release_repository(job: dict, tree: Path, scratch: Path, log) -> Path:  # type: ignore[no-untyped-def]
    """The project's repository at the release's tag, for an sdist that ships no tests (`testsuite.release_tree`);
    `PackageFailed` naming what to do when there is none."""
    names = "test_*.py, *_test.py, tests.py, test*.py, *tests.py or a tests/ folder"
    if "spec" not in job:
        git = job["git"]
        raise PackageFailed(
            f"{git['url']} at {git['ref']} holds no test files ({names}); a task is graded by the tests that fail "
            "without its feature: point the [[repos]] entry at a ref with its test suite"
        )
    found, tried = testsuite.release_tree(
        tree, job["name"], job["version"], scratch / "release", sources.fetch_git, log
    )
    if found is None:
        where = (
            f"nor does its repository at the release's tag (tried {', '.join(tried[:4])})"
            if tried
            else "and its metadata names no repository (Project-URL) to fetch them from"
        )
        raise PackageFailed(
            f"{job['spec']}: the sdist ships no test files ({names}), {where}; mine the project's repository "
            f"instead: a [[repos]] entry in corpus.toml with its url and ref = the release's tag"
        )
    log(f"fetch: the sdist ships no test files; mining {tried[-1]} instead (its metadata's repository)")
    return found


def _image(config, job, base, tree, meta, scratch, seconds, log):  # type: ignore[no-untyped-def]
    """Resolve the pins and build the image (skipped when the tag exists: same base and pins)."""
    from composer_prime.mining.ranking import top_packages

    emit(phase="image")
    began = time.monotonic()
    extra = list(config.requires) + (list(job["git"]["requires"]) if "git" in job else [])
    extra += config.package_requires.get(job["name"], []) if "spec" in job else []
    declared = meta.requires + meta.test_requires + extra
    inferred = testsuite.missing_imports(tree, declared)
    if inferred:
        log(f"requirements: the tests import {', '.join(inferred)}, which the metadata does not declare: added")
    wanted, notes = images.select(declared + inferred, base, job["name"])
    for note in notes:
        log(f"requirements: {note}")
    index_args = sources.pip_index_args(config.index_url, config.find_links)
    try:
        pins = images.resolve(wanted, base, job["name"], index_args, scratch / "wheels")
    except images.ImageError:
        if not inferred:
            raise
        log(f"requirements: resolving with the inferred {', '.join(inferred)} failed; trying each alone")
        kept = []
        for name in inferred:  # keep each inferred one that resolves beside the declared ones
            wanted, _ = images.select(declared + kept + [name], base, job["name"])
            try:
                images.resolve(wanted, base, job["name"], index_args, scratch / "probe")
            except images.ImageError as alone:
                reason = next((ln for ln in str(alone).splitlines() if "No matching distribution" in ln), str(alone))
                log(f"requirements: the inferred {name} left out: {reason.strip()[:300]}")
                job.setdefault("inferred_dropped", []).append(name)
            else:
                kept.append(name)
            shutil.rmtree(scratch / "probe", ignore_errors=True)
        inferred = kept
        wanted, _ = images.select(declared + inferred, base, job["name"])
        pins = images.resolve(wanted, base, job["name"], index_args, scratch / "wheels")
    job["inferred_requires"] = inferred
    seconds["resolve"] = round(time.monotonic() - began, 1)
    log(f"resolve: {len(pins)} pinned: " + ", ".join(f"{n}=={v}" for n, v in sorted(pins.items())))
    base_id = images.image_id(config.runtime, base.image) or base.image
    tag = images.image_tag(config.image_prefix, job["name"], job["version"], base, pins, base_id)
    began = time.monotonic()
    if images.image_id(config.runtime, tag) is None:
        texts = {p.relative_to(tree).as_posix(): "" for p in tree.rglob("__init__.py")}
        names = sorted(top_packages(texts) | {p.stem for p in tree.glob("*.py") if p.stem not in ("setup", "conftest")})
        images.build(config.runtime, tag, base, pins, scratch / "wheels", names)
        log(f"image: built {tag}")
    else:
        log(f"image: {tag} already built")
    seconds["build"] = round(time.monotonic() - began, 1)
    return tag, pins


def _mine(config, job, folder, tree, tag, base, scratch, seconds, log) -> dict:  # type: ignore[no-untyped-def]
    """Run the miner with every pytest run in a box from the image; its figures and skips by kind."""
    from composer_prime.mining import box
    from composer_prime.mining.config import MineConfig
    from composer_prime.mining.miner import Miner, MiningError, NoPassingTests

    emit(phase="mine")
    began = time.monotonic()
    work = scratch / "tmp"
    work.mkdir()
    tempfile.tempdir = str(work)  # the miner's private copy and plugin outputs: under the mounted folder
    # host_copies off: the host's site-packages are not the image's; `_validate` searches the image instead
    mine_config = MineConfig(
        repo=tree,
        out=folder / MINED_FILE,
        test_cmd=[base.python, "-m", "pytest"],
        host_copies=False,
        **config.miner.model_dump(),
    )
    miner = Miner(mine_config, log=log)
    label = job.get("spec") or f"{job['git']['url']}@{job['git']['ref']}"
    try:
        with box.mining_box(config.runtime, tag, scratch) as container:
            box.use(config.runtime, container)
            miner.run()
    except NoPassingTests as exc:
        where = (
            f'[package_requires] {job["name"]} = ["..."]'
            if "spec" in job
            else 'the [[repos]] entry\'s requires = ["..."]'
        )
        last = next((line.strip() for line in reversed(exc.tail.splitlines()) if line.strip()), "no output")
        raise PackageFailed(
            f"{label}: no test passes at baseline (exit code {exc.exit_code}; the run ended with: {last[:160]}); if "
            f"the tests need packages the metadata does not declare, name them in corpus.toml ({where}); mine.log "
            f"has the run's output. Last output lines:\n{exc.tail}"
        ) from exc
    except MiningError as exc:  # the scratch path means nothing to the reader: the package's name instead
        raise PackageFailed(f"mining {label}: {str(exc).replace(str(tree), label)}") from exc
    finally:
        tempfile.tempdir = None
    seconds["mine"] = round(time.monotonic() - began, 1)
    skipped = json.loads(miner.skipped_path.read_text("utf-8")) if miner.skipped_path.exists() else {}
    kinds = Counter(str(reason).split(":", 1)[0] for reason in skipped.get("skipped", {}).values())
    return {
        "candidates": miner.stats.get("candidates"),
        "baseline_tests_excluded": len(skipped.get("baseline_excluded", {})),
        "baseline_seconds": miner.stats.get("baseline_untraced_s"),
        "skipped": dict(kinds.most_common()),
    }


def _validate(config: CorpusConfig, folder: Path, image: str, python: str, seconds: dict, log) -> dict:  # type: ignore[no-untyped-def]
    """Drop the mined rows whose gold code the image holds, validate the rest in fresh boxes; write tasks.jsonl with
    the kept rows."""
    from composer_prime.corpus import image_copies
    from composer_prime.mining import box
    from composer_prime.mining.record import load_rows

    mined_path = folder / MINED_FILE
    rows = load_rows(mined_path)[0] if mined_path.exists() else []
    rows = [row.model_copy(update={"image": image}) for row in rows]
    verdicts_path = folder / VERDICTS_FILE
    verdicts = {}
    if verdicts_path.exists():
        for line in verdicts_path.read_text("utf-8").splitlines():
            if line.endswith("}"):
                verdict = json.loads(line)
                verdicts[verdict["task_id"]] = verdict
    began = time.monotonic()
    if rows:
        emit(phase="validate", total=len(rows), done=len([r for r in rows if r.task_id in verdicts]))
        candidates = folder / ".validate.jsonl"  # beside the base tarballs the rows name
        write_atomic(candidates, "".join(row.model_dump_json() + "\n" for row in rows))

        def record(verdict: box.Verdict) -> None:
            entry = {
                "task_id": verdict.task_id,
                "kept": verdict.kept,
                "reason": verdict.reason,
                "seconds": round(verdict.seconds, 1),
            }
            with verdicts_path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry) + "\n")
            verdicts[verdict.task_id] = entry
            log(
                f"validate: {verdict.task_id}: "
                + ("kept" if verdict.kept else f"dropped: {verdict.reason}")
                + f" ({verdict.seconds:.1f}s)"
            )
            emit(done=len(verdicts))

        golds = {row.task_id: row.gold_patch for row in rows if row.task_id not in verdicts}
        if golds:
            searched, found = image_copies.search_image(config.runtime, image, python, golds)
            log(
                f"image copies: {searched} file(s) of {image} searched for {len(golds)} task(s)' gold code, "
                f"{len(found)} found"
            )
            for task_id, files in sorted(found.items()):
                record(box.Verdict(task_id, False, image_copies.describe(files), 0.0))
        try:
            box.validate(candidates, config.runtime, set(verdicts), record)
        finally:
            candidates.unlink(missing_ok=True)
    seconds["validate"] = round(time.monotonic() - began, 1)
    kept = [row for row in rows if verdicts.get(row.task_id, {}).get("kept")]
    write_atomic(folder / TASKS_FILE, "".join(row.model_dump_json() + "\n" for row in kept))
    times = [v["seconds"] for v in verdicts.values()]
    return {
        "mined": len(rows),
        "kept": len(kept),
        "dropped": {v["task_id"]: v["reason"] for v in verdicts.values() if not v["kept"]},
        "validate_seconds_per_task": round(sum(times) / len(times), 1) if times else None,
    }


def unwind_on_sigterm(signum: int, frame: object) -> None:
    """The SIGTERM handler of a worker and of `mine-corpus` itself (the run interrupted, or its process gone): unwind,
    so that the boxes are stopped, the workers stopped and the scratch folders removed by the `finally`s; nothing of a
    package is recorded as complete. A second SIGTERM (a cgroup's
    stop signals every process, then the parent's death signals this one again) is ignored: it would cut the cleanup
    short."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    """Worker entry: `python -m composer_prime.corpus.package JOB.json` (written by `command.py`)."""
    signal.signal(signal.SIGTERM, unwind_on_sigterm)
    spec = json.loads(Path(argv[0]).read_text("utf-8"))
    config = CorpusConfig.model_validate(spec["config"])
    base = images.Base(**{**spec["base"], "missing": tuple(spec["base"]["missing"])})
    result = mine_package(config, spec["job"], base)
    emit(finished=True, kept=result["report"]["kept"], error=result["report"]["error"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
