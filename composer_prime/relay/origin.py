"""The origin: turn PRIME-RL's filesystem broadcasts into SHARDCAST versions and serve them over HTTP.

The trainer writes `<output_dir>/broadcasts/step_N/` (safetensors shards, the index last, then `STABLE`). The origin
polls for stable steps newer than the last one it published and, in step order, encodes each against the previous
version (a keyframe every `keyframe_interval` versions, or whenever there is no usable base) into `<data_dir>/v{N}/`,
then rewrites `distribution.txt`. It keeps a hard-linked copy of the last published step in `<data_dir>/.base`
(the trainer deletes `step_{N-2}`), which also lets a restarted origin continue the chain where it stopped.

Retention: every version from the `keep_keyframes`-th newest keyframe onward stays listed, so a client that is behind
by less than a keyframe interval catches up with deltas and any client can start from a listed keyframe.

Why not `shardcast.OriginServer`: it binds 0.0.0.0 with no host option, serves one request at a time from a loop in a
thread, numbers versions itself (v1, v2, ... not the trainer step), rewrites `distribution.txt` in place (a reader can
see it half-written), ships one opaque file per version and prunes by count, which can drop the keyframe a lagging
client needs. The origin here keeps its wire protocol (see `protocol.py`), so SHARDCAST relays can still fan it out.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import threading
import time
from pathlib import Path

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from composer_prime.atomic import fsync_dir, write_atomic
from composer_prime.relay import checkpoint, codec, protocol, signing
from composer_prime.relay.http import Served, serve_in_thread
from composer_prime.relay.manifest import RUN_ID_PATTERN, Manifest, ManifestError, parse_manifest
from composer_prime.relay.progress import ProgressLog, human_bytes
from composer_prime.relay.transport import server_tls

logger = logging.getLogger("composer_prime.relay.origin")
_STEP_DIR = re.compile(r"^step_(\d+)$")
_BASE, _BASE_NEW, _BASE_OLD = ".base", ".base.new", ".base.old"
_SOURCES = ".sources.json"
_SEQUENCE = ".sequence"


class OriginConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    output_dir: Path
    """PRIME-RL's `output_dir`; the origin watches `<output_dir>/broadcasts/step_N/`."""
    data_dir: Path
    """Where published versions live and are served from (needs room for about two keyframes plus deltas)."""
    signing_key_file: Path
    """The origin's Ed25519 private key (PEM, from `composer-prime relay keygen`): every version's manifest is signed
    with it, and clients trust only versions it signed. Keep it on the trainer host, readable by its owner only (a
    key that group or others can read is refused)."""
    run_id: str = Field(pattern=RUN_ID_PATTERN)
    """Names this training run in every signed manifest (letters, digits, `._:-`, up to 128): clients serve only the
    run_id they are given, so a key shared by several runs cannot make one run's versions pass as another's."""
    host: str = "0.0.0.0"
    """Address the HTTP server binds."""
    port: int = Field(8000, ge=0, le=65535)
    """HTTP port (SHARDCAST's default is 8000; 0 picks a free one)."""
    tls_cert_file: Path | None = None
    """TLS certificate chain (PEM): set, the origin speaks HTTPS only (clients list it as `https://`)."""
    tls_key_file: Path | None = None
    """Private key (PEM, unencrypted) of `tls_cert_file`."""
    tls_client_ca_file: Path | None = None
    """CA (PEM) whose client certificates the origin requires (mutual TLS): only clients holding one can download
    weights. Needs `tls_cert_file`."""
    keyframe_interval: int = Field(20, ge=1)
    """A full checkpoint every this many versions; clients further behind restart from the latest keyframe."""
    keep_keyframes: int = Field(2, ge=1)
    """Keyframes (each with the deltas after it) kept listed; 1 keeps only the latest keyframe onward."""
    shard_size: int = Field(50_000_000, ge=1024)
    """Bytes per shard file (SHARDCAST's default is 50 MB)."""
    chunk_elements: int = Field(1 << 23, ge=1024, le=codec.MAX_CHUNK_ELEMENTS)
    """Codec chunk size in tensor elements; bounds encoder and decoder memory to a few chunks."""
    zstd_level: int = Field(3, ge=1, le=22)
    """zstd level for every blob."""
    xor_values: bool = True
    """Store changed values XORed with the old bit patterns (smaller, still exact) instead of as they are."""
    poll_interval_s: float = Field(1.0, gt=0)
    """How often to look for new stable steps."""

    @field_validator("output_dir")
    @classmethod
    def _output_dir_exists(cls, value: Path) -> Path:
        """A missing output_dir would be watched forever (a typo, or the wrong host): refused at start."""
        if not value.is_dir():
            raise ValueError(
                f"output_dir = '{value}' is not an existing directory; give PRIME-RL's output_dir (the folder that "
                "holds broadcasts/step_N/) on this host, after the run has started"
            )
        return value

    @field_validator("signing_key_file")
    @classmethod
    def _signing_key_loads(cls, path: Path) -> Path:
        signing.load_signing_key(path, "signing_key_file")
        return path

    @model_validator(mode="after")
    def _tls_files(self) -> OriginConfig:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError(
                f"tls_cert_file = {self.tls_cert_file} and tls_key_file = {self.tls_key_file}: give both (the "
                "origin's certificate and its key) or neither"
            )
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError(
                f"tls_client_ca_file = '{self.tls_client_ca_file}' needs tls_cert_file and tls_key_file: client "
                "certificates are checked only over TLS"
            )
        server_tls(self.tls_cert_file, self.tls_key_file, self.tls_client_ca_file)
        return self


def stable_steps(broadcast_dir: Path) -> list[int]:
    """Steps whose `step_N/STABLE` exists, ascending."""
    if not broadcast_dir.is_dir():
        return []
    steps = []
    for entry in broadcast_dir.iterdir():
        match = _STEP_DIR.match(entry.name)
        if match and (entry / checkpoint.MARKER).exists():
            steps.append(int(match[1]))
    return sorted(steps)


TLS_READ_BYTES = 1 << 20
"""Bytes read from a file per write to a TLS connection: 1 MiB held per download in flight."""


def static_app(root: Path, tls: bool = False) -> web.Application:
    """GET/HEAD of files under `root`; dot-files (temp folders, the base copy) and directories are never served.

    Over plain HTTP a file goes out with `sendfile`. A TLS socket cannot take `sendfile`, and asyncio's fallback
    copies 256 KiB at a time with a thread hop and a drain each (a 4 MB delta took 3.5x as long as streaming it in
    1 MiB reads, bench/relay.py), so over TLS files are streamed in `TLS_READ_BYTES` reads instead."""

    async def serve(request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.match_info["path"].split("/") if p]
        if not parts or any(p.startswith(".") or p == ".." for p in parts):
            raise web.HTTPNotFound()
        path = root.joinpath(*parts)
        if not path.is_file():
            raise web.HTTPNotFound()
        if not tls or request.method == "HEAD":
            return web.FileResponse(path)
        return await _stream(request, path)

    app = web.Application()
    app.router.add_get("/{path:.*}", serve)  # GET routes answer HEAD too
    return app


async def _stream(request: web.Request, path: Path) -> web.StreamResponse:
    """`path` as the body of a 200, read `TLS_READ_BYTES` at a time off the event loop (a file vanishing under it,
    pruned by the origin, cuts the answer short: the client's size and blake3 checks catch it)."""
    loop = asyncio.get_running_loop()
    with path.open("rb") as file:
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = os.fstat(file.fileno()).st_size
        await response.prepare(request)
        while chunk := await loop.run_in_executor(None, file.read, TLS_READ_BYTES):
            await response.write(chunk)
    await response.write_eof()
    return response


class Origin:
    def __init__(self, config: OriginConfig):
        self.config = config
        self.data_dir = config.data_dir.resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.broadcast_dir = config.output_dir / "broadcasts"
        self.key = signing.load_signing_key(config.signing_key_file, "signing_key_file")
        self._recover_base()
        self.listing = self._load_listing()
        manifests = self._manifests()
        self.sequence = max([self._load_sequence(), *(m.sequence for m in manifests.values())])
        self.base = self._load_base()
        self.sources = self._load_sources()
        self._skipped: set[tuple[int, int]] = set()  # (step, STABLE mtime) left from before a resume, logged once
        if unverified := sorted(set(self.listing) - set(manifests)):
            # Signed with another key (it was rotated), of another run, or damaged: clients would refuse them.
            logger.warning(
                f"withdrawing {', '.join(protocol.version_name(step) for step in unverified)}: not signed by "
                f"signing_key_file (the key changed?), not of run_id {config.run_id!r}, or damaged; the next version "
                "is a keyframe"
            )
            self.listing = {step: listed for step, listed in self.listing.items() if step in manifests}
            self._write_listing()
            self.base = None
        if self.base and (not self.listing or max(self.listing) != self.base["step"]):
            logger.warning("the base copy is not the newest listed version: the next version will be a keyframe")
            self.base = None
        probe = self.data_dir / protocol.PROBE_FILE
        if not probe.exists():
            write_atomic(probe, bytes(64 * 1024))

    # -- state -----------------------------------------------------------------------------------------------------

    def _load_listing(self) -> dict[int, protocol.Listed]:
        path = self.data_dir / protocol.DISTRIBUTION_FILE
        if not path.exists():
            return {}
        listing = protocol.parse_distribution(path.read_text())
        return {step: v for step, v in listing.items() if (self.data_dir / protocol.version_name(step)).is_dir()}

    def _load_sources(self) -> dict[int, int]:
        """step -> mtime (ns) of the `STABLE` it was published from; a newer `STABLE` means the step was rewritten."""
        try:
            return {int(k): v for k, v in json.loads((self.data_dir / _SOURCES).read_text()).items()}
        except (OSError, ValueError):
            return {}

    def _stable_mtime(self, step: int) -> int | None:
        try:
            return (self.broadcast_dir / f"step_{step}" / checkpoint.MARKER).stat().st_mtime_ns
        except OSError:
            return None

    def _write_listing(self) -> None:
        write_atomic(
            self.data_dir / protocol.DISTRIBUTION_FILE,
            protocol.format_distribution(list(self.listing.values())).encode(),
        )
        self.sources = {step: mtime for step, mtime in self.sources.items() if step in self.listing}
        write_atomic(self.data_dir / _SOURCES, json.dumps(self.sources).encode())

    def _rewind(self, step: int) -> None:
        """The trainer wrote `step_{step}` again (restarted from an earlier checkpoint): withdraw v{step} and later."""
        withdrawn = sorted(s for s in self.listing if s >= step)
        logger.warning(
            f"step {step} was re-broadcast (trainer restarted from a checkpoint?): withdrawing "
            f"{', '.join(protocol.version_name(s) for s in withdrawn)} and starting a new keyframe chain"
        )
        for old in withdrawn:
            del self.listing[old]
        self._write_listing()
        for old in withdrawn:
            shutil.rmtree(self.data_dir / protocol.version_name(old), ignore_errors=True)
        self.base = None

    def _recover_base(self) -> None:
        base, new, old = (self.data_dir / name for name in (_BASE, _BASE_NEW, _BASE_OLD))
        if not base.exists() and new.exists():
            os.replace(new, base)
        shutil.rmtree(new, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)

    def _load_base(self) -> dict | None:
        meta = self.data_dir / _BASE / ".base.json"
        try:
            return json.loads(meta.read_text())
        except (OSError, ValueError):
            return None

    def _replace_base(self, step_dir: Path, meta: dict) -> None:
        new, base, old = (self.data_dir / name for name in (_BASE_NEW, _BASE, _BASE_OLD))
        shutil.rmtree(new, ignore_errors=True)
        new.mkdir()
        for name in checkpoint.checkpoint_files(step_dir):
            try:
                os.link(step_dir / name, new / name)
            except OSError:
                shutil.copy2(step_dir / name, new / name)
        write_atomic(new / ".base.json", json.dumps(meta).encode())
        fsync_dir(new)
        if base.exists():
            os.replace(base, old)
        os.replace(new, base)
        shutil.rmtree(old, ignore_errors=True)

    def _manifests(self) -> dict[int, Manifest]:
        """step -> manifest of every listed version of this run that reads back intact under the origin's own key."""
        manifests, public = {}, self.key.public_key()
        for step, listed in sorted(self.listing.items()):
            shard = self.data_dir / protocol.version_name(step) / protocol.shard_name(listed.num_shards)
            try:
                manifest = parse_manifest(shard.read_bytes(), public)
            except (OSError, ManifestError, signing.SignatureError):
                continue
            if manifest.run_id == self.config.run_id:
                manifests[step] = manifest
        return manifests

    def _keyframe_steps(self) -> list[int]:
        return [step for step, manifest in self._manifests().items() if manifest.keyframe]

    def _load_sequence(self) -> int:
        try:
            return int((self.data_dir / _SEQUENCE).read_text())
        except FileNotFoundError:
            return 0
        except (OSError, ValueError) as err:
            raise OSError(
                f"{self.data_dir / _SEQUENCE} is unreadable ({err}); it holds the last sequence this origin signed. "
                "Delete it only if the clock is right: sequences restart from the clock in ns"
            ) from None

    def _next_sequence(self) -> int:
        """Larger than every sequence published before, whatever the step: the clock in ns, or one more than the last
        if the clock went back. Recorded (atomically) before any manifest carries it, so a restart never reuses one;
        a wiped `data_dir` still gets the clock's."""
        self.sequence = max(time.time_ns(), self.sequence + 1)
        write_atomic(self.data_dir / _SEQUENCE, str(self.sequence).encode())
        return self.sequence

    # -- publishing ------------------------------------------------------------------------------------------------

    def pending(self) -> list[int]:
        """Stable steps to publish, in step order.

        The trainer writes steps in increasing order, so along increasing steps the `STABLE` times never go back. A
        `STABLE` newer than every one published, on a step at or below the newest listed, means the trainer went
        back (resumed from a checkpoint: its first broadcast is its start step again): the versions from that step
        on are withdrawn and it is published anew, with a new sequence. A step above it whose `STABLE` is older than
        a lower step's is left from before the trainer went back: skipped until the trainer writes it again.
        """
        stable = {step: self._stable_mtime(step) for step in stable_steps(self.broadcast_dir)}
        stable = {step: mtime for step, mtime in stable.items() if mtime is not None}
        floor = max(self.sources.values(), default=-1)
        last = max(self.listing) if self.listing else -1
        went_back = [step for step, mtime in stable.items() if step <= last and mtime > floor]
        if went_back and self.sources:
            start = min(went_back)
            self._rewind(start)
            last = start - 1  # the steps below it are the old run's too: not published again
            floor = max(self.sources.values(), default=-1)
        steps = []
        for step, mtime in sorted(stable.items()):
            if step <= last:
                continue
            if mtime < floor:
                if (step, mtime) not in self._skipped:
                    self._skipped.add((step, mtime))
                    logger.warning(
                        f"step_{step}'s STABLE is older than a lower step's: left from before the trainer resumed; "
                        "skipped until the trainer writes it again"
                    )
                continue
            steps.append(step)
            floor = mtime
        return steps

    def publish(self, step: int) -> protocol.Listed | None:
        """Encode and list `broadcasts/step_{step}`. Returns None if the trainer deleted it first."""
        cfg = self.config
        step_dir = self.broadcast_dir / f"step_{step}"
        base = None
        if self.base is not None and (self.data_dir / _BASE).is_dir():
            base = protocol.Base(self.base["step"], self.data_dir / _BASE, self.base["digest"])
        since = self.base["since_keyframe"] + 1 if base is not None else 0
        keyframe = base is None or since >= cfg.keyframe_interval
        source_mtime = self._stable_mtime(step)
        try:
            files = checkpoint.checkpoint_files(step_dir)
            total = sum((step_dir / name).stat().st_size for name in files)
            progress = ProgressLog(
                logger, f"step {step} {'keyframe' if keyframe else 'delta'}", total * (2 if keyframe and base else 1)
            )
            manifest, listed = protocol.encode_version(
                step_dir,
                step,
                base,
                keyframe,
                self.data_dir,
                cfg.shard_size,
                cfg.chunk_elements,
                cfg.zstd_level,
                self.key,
                self._next_sequence(),
                cfg.run_id,
                cfg.xor_values,
                progress,
            )
        except FileNotFoundError:
            logger.warning(f"step {step} vanished before it was encoded (the trainer cleans old steps); skipping it")
            shutil.rmtree(self.data_dir / f".{protocol.version_name(step)}.tmp", ignore_errors=True)
            return None
        self.listing[step] = listed
        if source_mtime is not None:
            self.sources[step] = source_mtime
        stale = self._prune()
        self._write_listing()
        # Folders go after the listing stops naming them; a reader racing this gets a 404 and re-reads the listing.
        for old in stale:
            shutil.rmtree(self.data_dir / protocol.version_name(old), ignore_errors=True)
        self._replace_base(
            step_dir, {"step": step, "digest": manifest.digest, "since_keyframe": 0 if keyframe else since}
        )
        self.base = self._load_base()
        delta = manifest.section("delta")
        logger.info(
            f"published v{step}: {human_bytes(total)} checkpoint"
            + (f", delta {human_bytes(delta.size)} ({total / max(delta.size, 1):.1f}x)" if delta else "")
            + (" + keyframe" if keyframe else "")
            + f" in {progress.elapsed():.1f}s"
        )
        return listed

    def _prune(self) -> list[int]:
        """Drop versions older than the oldest kept keyframe from the listing; returns the folders to delete."""
        keyframes = self._keyframe_steps()
        if len(keyframes) <= self.config.keep_keyframes:
            return []
        oldest_kept = keyframes[-self.config.keep_keyframes]
        for step in [s for s in self.listing if s < oldest_kept]:
            del self.listing[step]
        folders = [int(p.name[1:]) for p in self.data_dir.glob("v*") if p.is_dir() and p.name[1:].isdigit()]
        return [s for s in folders if s < oldest_kept]

    # -- serving ---------------------------------------------------------------------------------------------------

    def serve(self) -> Served:
        cfg = self.config
        tls = server_tls(cfg.tls_cert_file, cfg.tls_key_file, cfg.tls_client_ca_file)
        app = static_app(self.data_dir, tls=tls is not None)
        return serve_in_thread(app, cfg.host, cfg.port, "relay-origin-http", tls)

    def run(self, stop: threading.Event) -> None:
        server = self.serve()
        logger.info(f"serving {self.data_dir} on {server.url}; watching {self.broadcast_dir}")
        try:
            while not stop.is_set():
                for step in self.pending():
                    if stop.is_set():
                        break
                    try:
                        self.publish(step)
                    except OSError:
                        # Disk full, permissions, a step dir being rewritten...: nothing was listed; try again at
                        # the next poll rather than take the relay down.
                        logger.exception(f"publishing step {step} failed; retrying at the next poll")
                        break
                stop.wait(self.config.poll_interval_s)
        finally:
            server.stop()
