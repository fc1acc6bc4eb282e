"""`composer-prime mine-corpus`: mine Feature Deletion tasks from many packages, each in an image of its own.

For each package (a PyPI sdist `NAME==VERSION` or a git repository at a ref): fetch it on this machine, build its
environment image (the base image's Python plus its test dependencies, resolved and pinned, wheels fetched here;
never the package's own code), run its baseline suite and the miner in a container from that image, and validate
every kept task in fresh containers with the full grader through the feature-deletion taskset (gold 1.0,
untouched 0.0). `package` does one package in a worker process; this module checks the input, probes the base image
once, runs up to `jobs` workers, shows their progress, rebuilds the corpus's dataset (`dataset`) after each package,
and prints the corpus table at the end. A package whose package.json exists is skipped, so a re-run resumes.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

WORKER_TIMEOUT_S = 48 * 3600.0


def main(argv: list[str], prog: str) -> int:
    from composer_prime.cli import parse_config
    from composer_prime.corpus.config import CorpusConfig, check_inputs, check_runtime, planned

    config = parse_config(CorpusConfig, argv, prog, description=__doc__.splitlines()[0].split(": ", 1)[1])
    try:
        check_inputs(config)
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    from rich.console import Console

    from composer_prime.corpus import images, package

    console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)  # logs: no wrapped rows
    jobs = planned(config)
    todo = [job for job in jobs if not _complete(Path(job["folder"]), config.retry_failed)]
    share = (
        f" (shard {config.shard} of the config's {len(config.packages) + len(config.repos)})" if config.shard else ""
    )
    console.print(
        f"mine-corpus: {len(jobs)} package(s){share}, {len(jobs) - len(todo)} already complete in {config.out}"
    )
    crashed = []
    if todo:
        try:
            check_runtime(config)
            with console.status(f"probing base image {config.base_image}"):
                base = images.probe(config.runtime, config.base_image)
        except (ValueError, images.ImageError) as exc:
            print(f"{prog}: {exc}", file=sys.stderr)
            return 2
        console.print(f"mine-corpus: base {base.image} (Python {base.version}), {config.jobs} package(s) at once")
        signal.signal(signal.SIGTERM, package.unwind_on_sigterm)  # as Ctrl-C: workers stopped, the jobs folder removed
        crashed = _run_all(config, todo, base, console)
    _summary(console, jobs)
    for job, why in crashed:
        console.print(f"[red]{job['name']} {job['version']}: {why}[/red]; see {Path(job['folder']) / package.LOG_FILE}")
    return 1 if crashed else 0


def _complete(folder: Path, retry_failed: bool) -> bool:
    from composer_prime.corpus.config import PACKAGE_FILE

    path = folder / PACKAGE_FILE
    if not path.is_file():
        return False
    try:
        report = json.loads(path.read_text("utf-8")).get("report", {})
    except (json.JSONDecodeError, AttributeError):
        return False
    return not (retry_failed and report.get("error"))


def _run_all(config, todo: list[dict], base, console) -> list[tuple[dict, str]]:  # type: ignore[no-untyped-def]
    """Run one worker per package, `config.jobs` at once, with a progress bar each; the crashed ones and why."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    crashed: list[tuple[dict, str]] = []
    lock = threading.Lock()
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with (
        tempfile.TemporaryDirectory(prefix="composer-prime-corpus-jobs-") as jobs_dir,
        Progress(*columns, console=console) as progress,
    ):
        overall = progress.add_task("packages", total=len(todo))

        def one(job: dict) -> None:
            label = f"{job['name']} {job['version']}"
            bar = progress.add_task(f"{label}: queued", total=None)
            spec = Path(jobs_dir) / f"{Path(job['folder']).name}.json"
            spec.write_text(json.dumps({"config": config.model_dump(mode="json"), "job": job, "base": asdict(base)}))
            why = _worker(spec, lambda event: _show(progress, bar, label, event, console))
            if why:
                with lock:
                    crashed.append((job, why))
            elif config.dataset:
                _rebuild_dataset(config, console)
            progress.update(bar, visible=False)
            progress.advance(overall)

        pool = ThreadPoolExecutor(max_workers=config.jobs)
        try:
            for future in [pool.submit(one, job) for job in todo]:
                future.result()
        except BaseException:  # Ctrl-C, SIGTERM (`main`): the workers stop (they clean up), then the run ends
            with _LOCK:
                _STOPPING.set()  # a worker spawned from now on is stopped at once (`_worker`)
                workers = list(_WORKERS)
            for proc in workers:
                proc.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown()
    return crashed


def _rebuild_dataset(config, console) -> None:  # type: ignore[no-untyped-def]
    """Rebuild the corpus's dataset (`composer_prime.corpus.dataset`; builds of one folder take turns on its lock)."""
    from composer_prime.corpus.dataset import DatasetInputError, build_dataset

    try:
        report = build_dataset(config.out, publish=config.publish, log=lambda line: None)
    except DatasetInputError as exc:  # its first line; the rest lists what was left out, packages still running too
        console.print(f"dataset: not rebuilt: {str(exc).splitlines()[0]}")
    except ImportError as exc:
        console.print(f"dataset: not built ({exc}); install composer-prime[corpus] or set dataset = false")
    else:
        left_out = f", {len(report.problems)} left out (packages still running count)" if report.problems else ""
        console.print(f"dataset: {report.tasks} task(s) of {len(report.packages)} package(s) in {config.out}{left_out}")


_WORKERS: set[subprocess.Popen] = set()
"""The running workers, terminated when the run is interrupted."""
_LOCK = threading.Lock()
_STOPPING = threading.Event()


def _worker(spec: Path, on_event) -> str | None:  # type: ignore[no-untyped-def]
    """Run `package.main` on `spec` in a new process, feeding its events to `on_event`; None when it finished. The
    worker gets SIGTERM (and cleans up: its mining box, its scratch folder) when this process dies, even by SIGKILL
    (`process.children.spawn`), or when the run is interrupted."""
    from composer_prime.process.children import spawn

    proc = spawn(
        [sys.executable, "-m", "composer_prime.corpus.package", str(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    with _LOCK:
        _WORKERS.add(proc)
        if _STOPPING.is_set():  # started while the run was being interrupted
            proc.terminate()
    try:
        return _follow(proc, on_event)
    finally:
        with _LOCK:
            _WORKERS.discard(proc)


def _follow(proc: subprocess.Popen, on_event) -> str | None:  # type: ignore[no-untyped-def]
    finished = False
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    for line in proc.stdout:  # type: ignore[union-attr]
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        finished = finished or bool(event.get("finished"))
        on_event(event)
    code = proc.wait(timeout=WORKER_TIMEOUT_S)
    reader.join(timeout=10)
    if code == 0 and finished:
        return None
    tail = "".join(errors).strip().splitlines()[-1:] or ["no output"]
    return f"the worker exited {code}: {tail[0][:300]}"


def _show(progress, bar, label: str, event: dict, console) -> None:  # type: ignore[no-untyped-def]
    if "phase" in event:
        progress.update(bar, description=f"{label}: {event['phase']}", total=event.get("total"), completed=0)
    if "total" in event and "phase" not in event:
        progress.update(bar, total=event["total"], completed=0)
    if "done" in event:
        progress.update(bar, completed=event["done"])
    if not console.is_terminal:  # a log file or a pipe shows no bars: a line per phase, and every 10 items
        task = next(t for t in progress.tasks if t.id == bar)
        phase = task.description.split(": ", 1)[-1]
        if "phase" in event:
            console.print(f"{label}: {phase}" + (f" (0/{task.total:g})" if task.total else ""))
        elif "done" in event and (event["done"] % 10 == 0 or (task.total and event["done"] >= task.total)):
            console.print(f"{label}: {phase} {event['done']}/{f'{task.total:g}' if task.total else '?'}")
    if event.get("finished"):
        outcome = f"error: {event['error']}" if event.get("error") else f"{event['kept']} task(s) kept"
        console.print(f"{label}: {outcome[:300]}")


def _summary(console, jobs: list[dict]) -> None:  # type: ignore[no-untyped-def]
    """The corpus table: one row per package with a package.json."""
    from rich.table import Table

    from composer_prime.corpus.config import PACKAGE_FILE
    from composer_prime.corpus.licenses import classify

    table = Table(title="corpus")
    for column in ("package", "license", "candidates", "mined", "kept", "top skips", "min", "s/task", "image MB"):
        table.add_column(column, justify="left" if column in ("package", "license", "top skips") else "right")
    totals = [0, 0]
    for job in jobs:
        path = Path(job["folder"]) / PACKAGE_FILE
        if not path.is_file():
            table.add_row(f"{job['name']} {job['version']}", "", "", "", "", "not complete", "", "", "")
            continue
        try:
            data = json.loads(path.read_text("utf-8"))
            report = data["report"]
            skips = ", ".join(f"{n} {k}" for k, n in list((report.get("skipped") or {}).items())[:3])
            row = (
                f"{data['name']} {data['version']}",
                classify(data.get("license")).license[:24],
                str(report.get("candidates") if report.get("candidates") is not None else "-"),
                str(report.get("mined", 0)),
                str(report.get("kept", 0)),
                f"error: {report['error'].splitlines()[0][:200]}" if report.get("error") else skips,
                f"{(report.get('seconds') or {}).get('total', 0) / 60:.1f}",
                str(report.get("seconds_per_task") or "-"),
                f"{data['image_bytes'] / 1e6:.0f}" if data.get("image_bytes") else "-",
            )
            mined, kept = int(report.get("mined") or 0), int(report.get("kept") or 0)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            why = f"{type(exc).__name__}: {exc}"[:80]
            table.add_row(
                f"{job['name']} {job['version']}",
                "",
                "",
                "",
                "",
                f"unreadable {path} ({why}); remove it to mine the package again",
                "",
                "",
                "",
            )
            continue
        totals[0] += mined
        totals[1] += kept
        table.add_row(*row)
    table.add_section()
    table.add_row("total", "", "", str(totals[0]), str(totals[1]), "", "", "", "")
    console.print(table)
