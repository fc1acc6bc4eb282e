"""The client side: materialise a published step on this host, from the nearest base it can prove it has.

`Fetcher.ensure_step(N)` returns `<store>/steps/step_N/`, a checkpoint directory byte-identical to the trainer's
`broadcasts/step_N/`, building it if needed:

1. wait (bounded) until the relay lists `vN`;
2. plan: read manifests backwards from `vN` until one has a delta section whose base this host holds (same step,
   same checkpoint digest) or a full section (a keyframe); a chain that reaches an unlisted version before either is
   a `RelayError` ("missing keyframe"). Every manifest read must carry the origin's signature (`signing.py`), and
   the plan must be newer than what this host served and in order (`trust.py`): otherwise `Refused`, before a body
   shard is fetched;
3. for each version of the plan, fetch the shards of the section it needs into `<store>/downloads/vK/`, each checked
   against the manifest's size and blake3 (a corrupt or truncated shard is deleted and fetched again, a bounded
   number of times); shards already there from an earlier run are re-checked and reused, so a restart resumes;
4. decode into a dot-named temp folder (every tensor, file and the checkpoint digest checked), fsync, write
   `.relay.json` and `STABLE`, then rename to `steps/step_K/`.

Disk stays bounded: after a step is built its downloads are deleted, and only the `keep_steps` newest steps stay.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import blake3
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from composer_prime.atomic import fsync_dir, write_atomic
from composer_prime.relay import checkpoint, protocol, signing, store, trust
from composer_prime.relay.manifest import (
    RUN_ID_PATTERN,
    Manifest,
    ManifestError,
    Section,
    checkpoint_digest,
    parse_manifest,
)
from composer_prime.relay.progress import ProgressLog, human_bytes
from composer_prime.relay.transport import Cancelled, Refused, RelayError, Remote, client_tls

logger = logging.getLogger("composer_prime.relay.client")


class ClientConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    servers: list[str] = Field(min_length=1)
    """Relay base URLs (the origin or SHARDCAST middle nodes), tried in turn; space- or comma-separated. All
    `https://` or all `http://`: a client that speaks TLS never falls back to plain HTTP."""
    store_dir: Path
    """Where downloads and materialised steps live on this host."""
    verify_key_file: Path
    """The origin's Ed25519 public key (PEM, from `composer-prime relay keygen`): every version's manifest must carry
    its signature before a byte of the version is fetched."""
    run_id: str = Field(pattern=RUN_ID_PATTERN)
    """The origin's `run_id`: only versions signed for this run are served (one key may sign several runs)."""
    tls_ca_file: Path | None = None
    """CA certificate (PEM) that signs the origin's TLS certificate; needs `https://` servers. Unset with `https://`
    servers: the system's trust store."""
    tls_cert_file: Path | None = None
    """Client certificate chain (PEM) for an origin that requires one (its `tls_client_ca_file`); with `tls_key_file`."""
    tls_key_file: Path | None = None
    """Private key (PEM, unencrypted, readable by its owner only) of `tls_cert_file`."""
    keep_steps: int = Field(2, ge=1)
    """Materialised steps kept: the one vLLM serves and the newest; older ones are deleted."""
    wait_for_version_s: float = Field(600.0, gt=0)
    """How long `/update_weights` waits for the origin to publish the requested step, or to publish it again when
    the relay has only a publication older than what this host served (PRIME-RL gives the call 720 s)."""
    poll_interval_s: float = Field(0.5, gt=0)
    """How often to re-read the listing while waiting."""
    http_timeout_s: float = Field(30.0, gt=0)
    """Per-request timeout."""
    retries: int = Field(5, ge=1)
    """Attempts per shard (a corrupt, truncated or failed fetch counts as one)."""
    concurrency: int = Field(4, ge=1)
    """Shards fetched in parallel (each is held in memory while it is checked: at most `concurrency` x shard size)."""

    @field_validator("servers", mode="before")
    @classmethod
    def _split_commas(cls, servers: object) -> object:
        if isinstance(servers, str):
            servers = [servers]
        if isinstance(servers, list):
            return [part.strip() for item in servers for part in str(item).split(",") if part.strip()]
        return servers

    @field_validator("servers")
    @classmethod
    def _http_urls(cls, servers: list[str]) -> list[str]:
        for server in servers:
            if not server.startswith(("http://", "https://")):
                raise ValueError(f"relay server {server!r} is not an http(s) URL; write it as http://host:port")
        schemes = {server.split("://", 1)[0] for server in servers}
        if len(schemes) > 1:
            raise ValueError(
                f"servers = {servers} mix https:// and http://; a client that speaks TLS never falls back to plain "
                "HTTP: give every relay server as https://"
            )
        return servers

    @field_validator("verify_key_file")
    @classmethod
    def _verify_key_loads(cls, path: Path) -> Path:
        signing.load_verify_key(path, "verify_key_file")
        return path

    @model_validator(mode="after")
    def _tls_files(self) -> ClientConfig:
        tls_fields = {"tls_ca_file": self.tls_ca_file, "tls_cert_file": self.tls_cert_file}
        for name, value in tls_fields.items():
            if value is not None and not self.servers[0].startswith("https://"):
                raise ValueError(
                    f"{name} = '{value}' is set but servers = {self.servers} are plain http://; write them as "
                    "https://host:port (the origin needs tls_cert_file) or drop the TLS files"
                )
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError(
                f"tls_cert_file = {self.tls_cert_file} and tls_key_file = {self.tls_key_file}: give both (a client "
                "certificate and its key) or neither"
            )
        client_tls(self.tls_ca_file, self.tls_cert_file, self.tls_key_file)
        return self


class Fetcher:
    def __init__(self, config: ClientConfig):
        self.config = config
        self.store = config.store_dir.resolve()
        self.steps_dir = self.store / "steps"
        self.downloads = self.store / "downloads"
        self.steps_dir.mkdir(parents=True, exist_ok=True)
        self.downloads.mkdir(parents=True, exist_ok=True)
        for stale in self.steps_dir.glob(".*"):
            shutil.rmtree(stale, ignore_errors=True)  # half-built steps from a crash
        self._lock = threading.Lock()  # guards _pinned; held only for bookkeeping, never across network waits
        self._build_lock = threading.Lock()  # one build at a time (they share downloads/ and prune steps/)
        self._pinned: Counter[int] = Counter()  # steps vLLM may be reading right now, or a request is handing out
        self._manifests: dict[tuple[int, str], Manifest] = {}  # (step, payload checksum) -> manifest
        self.verify_key = signing.load_verify_key(config.verify_key_file, "verify_key_file")
        tls = client_tls(config.tls_ca_file, config.tls_cert_file, config.tls_key_file)
        tls_fields = {"tls_ca_file": config.tls_ca_file, "tls_cert_file": config.tls_cert_file}
        self.remote = Remote(config.servers, config.http_timeout_s, config.retries, tls, tls_fields)
        served = trust.load_served(self.store)
        # Another run's record says nothing about this run's sequences; this run's versions are told apart by run_id.
        self.served = served if served is not None and served.run_id == config.run_id else None

    # -- local state -----------------------------------------------------------------------------------------------

    def local_steps(self) -> dict[int, str]:
        """step -> checkpoint digest of every complete materialised step."""
        return store.built_steps(self.steps_dir)

    def _meta(self, step: int) -> dict | None:
        return store.read_meta(self.step_dir(step))

    def mark_served(self, step: int) -> None:
        """vLLM took `step`: from now on nothing published before it is served (`trust.check_not_replayed`)."""
        meta = self._meta(step)
        if meta is None:
            return
        served = trust.Served(self.config.run_id, step, meta["sequence"], meta["digest"])
        with self._lock:
            if self.served is None or served.sequence >= self.served.sequence:
                trust.save_served(self.store, served)
                self.served = served

    def step_dir(self, step: int) -> Path:
        return self.steps_dir / f"step_{step}"

    # -- the relay -------------------------------------------------------------------------------------------------

    def listing(self) -> dict[int, protocol.Listed]:
        return self.remote.listing()

    def wait_listed(self, step: int, cancel: threading.Event | None = None) -> dict[int, protocol.Listed]:
        return self.remote.wait_listed(step, self.config.wait_for_version_s, self.config.poll_interval_s, cancel)

    def manifest(self, listed: protocol.Listed) -> Manifest:
        """The signed manifest of `listed.step`: of the entries the relay servers list for the step (they may list
        different publications of it), the newest one that verifies. `Refused` when every one is refused."""
        entries = [listed, *(e for e in self.remote.candidates.get(listed.step, []) if e != listed)]
        found, refused, errors = [], [], []
        for entry in entries:
            try:
                found.append(self._manifest(entry))
            except Refused as err:
                refused.append(err)
            except (RelayError, ManifestError) as err:
                errors.append(err)
        if found:
            return max(found, key=lambda manifest: manifest.sequence)
        if refused and not errors:
            raise refused[0]
        raise errors[0]

    def _manifest(self, listed: protocol.Listed) -> Manifest:
        key = (listed.step, listed.checksum)
        if key in self._manifests:
            return self._manifests[key]
        path = f"{protocol.version_name(listed.step)}/{protocol.shard_name(listed.num_shards)}"

        def check(data: bytes) -> Manifest:
            try:
                manifest = parse_manifest(data, self.verify_key)
            except signing.SignatureError as err:
                raise Refused(f"{path}: {err}") from None
            trust.check_run(path, manifest.run_id, self.config.run_id)
            if manifest.step != listed.step:
                raise Refused(f"{path} is listed as v{listed.step} but its signed manifest is v{manifest.step}")
            if len(manifest.shards) + 1 != listed.num_shards:
                raise ManifestError(f"{path} describes v{manifest.step} with {len(manifest.shards)} body shards")
            return manifest

        manifest = self.remote.get_checked(path, check)
        self._manifests[key] = manifest
        return manifest

    def _shard(self, step: int, index: int, size: int, digest: str) -> Path:
        folder = self.downloads / protocol.version_name(step)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / protocol.shard_name(index)
        if path.exists():
            if path.stat().st_size == size and blake3.blake3(path.read_bytes()).hexdigest() == digest:
                return path
            logger.warning(f"{path} on disk is damaged; fetching it again")
            path.unlink()

        def check(data: bytes) -> Path:
            if len(data) != size or blake3.blake3(data).hexdigest() != digest:
                raise RelayError(f"got {len(data)} bytes (want {size}) with the wrong checksum")
            write_atomic(path, data)
            return path

        return self.remote.get_checked(f"{protocol.version_name(step)}/{protocol.shard_name(index)}", check, size)

    # -- planning and applying -------------------------------------------------------------------------------------

    def plan(self, step: int, listing: dict[int, protocol.Listed]) -> list[tuple[Manifest, Section]]:
        """The versions to apply, oldest first, each with the section to use."""
        local = self.local_steps()
        chain: list[tuple[Manifest, Section]] = []
        current = step
        while True:
            if current not in listing:
                raise RelayError(
                    f"cannot rebuild step {step}: v{current} is needed (no keyframe or local base after it) but the "
                    f"relay lists only {sorted(listing)}; wait for the next keyframe "
                    "or raise keep_keyframes on the origin"
                )
            manifest = self.manifest(listing[current])
            delta, full = manifest.section("delta"), manifest.section("full")
            if delta is not None and local.get(delta.base_step) == delta.base_digest:
                chain.append((manifest, delta))
                break
            if full is not None:
                chain.append((manifest, full))
                break
            if delta is None:
                raise RelayError(f"v{current} has neither a delta nor a full section")
            if delta.base_step is None or delta.base_step >= current:
                raise Refused(f"v{current}'s delta applies to step {delta.base_step}, not an earlier one: out of order")
            chain.append((manifest, delta))
            current = delta.base_step
        chain.reverse()
        # Every manifest of the plan is signed and checked; no body shard has been fetched yet.
        trust.check_not_replayed(step, chain[-1][0].sequence, self.served)
        trust.check_chain(step, chain)
        return chain

    def _apply(self, manifest: Manifest, section: Section) -> Path:
        shards = {}
        with ThreadPoolExecutor(self.config.concurrency) as pool:
            futures = {
                index: pool.submit(
                    self._shard,
                    manifest.step,
                    index,
                    manifest.shards[index - 1].size,
                    manifest.shards[index - 1].blake3,
                )
                for index in range(section.first_shard, section.first_shard + section.num_shards)
            }
            for index, future in futures.items():
                shards[index] = future.result()
        base = None
        if section.kind == "delta":
            base_dir = self.step_dir(section.base_step)
            base = checkpoint.scan_checkpoint(base_dir)
        tmp = self.steps_dir / f".step_{manifest.step}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        total = sum(f.size for f in section.files)
        progress = ProgressLog(logger, f"v{manifest.step} {section.kind}", total)
        reader = protocol.SectionReader(manifest, section, lambda index: shards[index])
        hashes = checkpoint.decode_files(section.files, reader, base, tmp, manifest.chunk_elements, progress)
        if checkpoint_digest(hashes) != manifest.digest:
            shutil.rmtree(tmp, ignore_errors=True)
            raise checkpoint.DecodeError(f"v{manifest.step}: rebuilt checkpoint digest differs from the published one")
        files = {name: store.file_blake3(tmp / name) for name in hashes}  # the page cache still holds them: cheap
        meta = {"step": manifest.step, "digest": manifest.digest, "sequence": manifest.sequence, "files": files}
        store.write_meta(tmp, meta)
        (tmp / checkpoint.MARKER).touch()
        fsync_dir(tmp)
        final = self.step_dir(manifest.step)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        shutil.rmtree(self.downloads / protocol.version_name(manifest.step), ignore_errors=True)
        logger.info(
            f"built step_{manifest.step} from {section.kind} v{manifest.step}: {human_bytes(section.size)} fetched for "
            f"{human_bytes(total)} in {progress.elapsed():.2f}s"
        )
        return final

    def ensure_step(
        self,
        step: int,
        pin: bool = False,
        cancel: threading.Event | None = None,
        verify: bool = False,
        wait_for_newer: bool = True,
    ) -> Path:
        """The local directory of `step`, built from the relay if it is not here yet.

        A step already built is answered without waiting for a build in progress. With `verify`, a step built
        earlier is re-hashed against the digests recorded when it was built, and rebuilt if it was damaged since.
        With `pin`, the step is not pruned until `release(step)`: vLLM may still be reading it. `cancel` stops a
        wait for an unpublished step (raises `Cancelled`). When the only publication of `step` is older than what
        this host served, the call waits for a newer one (`wait_for_newer`, up to `wait_for_version_s`) and then
        raises `trust.Stale`.
        """
        with self._lock:
            self._pinned[step] += 1  # held while this call runs, so a concurrent build cannot prune the step
        done = False
        deadline = time.monotonic() + self.config.wait_for_version_s
        waiting = False
        try:
            while True:
                try:
                    path = self._current(step, cancel, verify)
                    done = True
                    return path
                except Cancelled:
                    raise
                except trust.Stale as err:
                    # Only a publication older than what vLLM got: a replay, or the origin has yet to publish the
                    # step again (a resumed trainer re-broadcasts its start step). Wait for a newer one, bounded.
                    if time.monotonic() > deadline:
                        raise trust.Stale(
                            f"{err}; no newer publication of v{step} within wait_for_version_s="
                            f"{self.config.wait_for_version_s:.0f}s"
                        ) from None
                    if not wait_for_newer:
                        raise
                    if not waiting:
                        logger.warning(f"{err}; waiting for the origin to publish v{step} again")
                        waiting, verify = True, False  # the copy here was re-hashed once already
                    if cancel is None:
                        time.sleep(self.config.poll_interval_s)
                    elif cancel.wait(self.config.poll_interval_s):
                        raise Cancelled(f"stopped waiting for v{step}: the request was cancelled") from None
                except (RelayError, ManifestError, protocol.ProtocolError) as err:
                    # Listed, yet no server's answer built it: a mirror may list a step the origin has not published
                    # (with a manifest that is refused), or every server failed this round. The step is waited for as
                    # an unlisted one is, up to wait_for_version_s, so one hostile mirror costs its turn, not the step.
                    if time.monotonic() > deadline or not wait_for_newer:
                        raise
                    if not waiting:
                        logger.warning(f"step_{step}: {err}; asking again until wait_for_version_s runs out")
                        waiting = True
                    if cancel is None:
                        time.sleep(self.config.poll_interval_s)
                    elif cancel.wait(self.config.poll_interval_s):
                        raise Cancelled(f"stopped waiting for v{step}: the request was cancelled") from None
        finally:
            if not (pin and done):
                self.release(step)

    def _current(self, step: int, cancel: threading.Event | None, verify: bool) -> Path:
        """`step` built here from a publication no older than what vLLM got last (else `trust.Stale`)."""
        if not self._ready(step, verify):
            listing = self.wait_listed(step, cancel)
            with self._build_lock:
                if not self._ready(step, verify):
                    self._build(step, listing)
        meta = self._meta(step)
        if meta is None:
            raise RelayError(f"step_{step} vanished from {self.steps_dir} as it was handed out")
        trust.check_not_replayed(step, meta["sequence"], self.served)
        return self.step_dir(step)

    def _ready(self, step: int, verify: bool) -> bool:
        if not self._local_is_current(step):
            return False
        if verify and not self.verify_files(step):
            logger.error(f"step_{step} on disk no longer matches the files it was built with; rebuilding it")
            shutil.rmtree(self.step_dir(step), ignore_errors=True)
            return False
        return True

    def verify_files(self, step: int) -> bool:
        return store.verify_files(self.step_dir(step))

    def _local_is_current(self, step: int) -> bool:
        """Whether `step` is built here and, if the relay still lists it, is the version the relay has now.

        A trainer restarted from a checkpoint writes the same step numbers again with other weights; the origin
        re-publishes them (with a newer sequence), and a copy built from the earlier run must not be served. A relay
        that offers an older or unverifiable publication of the step does not replace the copy here.
        """
        meta = self._meta(step)
        if meta is None:
            return False
        try:
            listed = self.listing().get(step)
            current = self.manifest(listed) if listed else None
        except (RelayError, ManifestError, protocol.ProtocolError) as err:
            logger.warning(f"cannot confirm step_{step} with the relay ({err}); using the local copy")
            return True
        if current is None:
            return True
        if current.sequence < meta["sequence"]:
            logger.warning(
                f"the relay offers v{step} with sequence {current.sequence}, older than the copy here "
                f"({meta['sequence']}): a replayed publication; using the local copy"
            )
            return True
        if current.digest != meta["digest"]:
            logger.warning(f"step_{step} here is from an earlier publication of that step; rebuilding it")
            shutil.rmtree(self.step_dir(step), ignore_errors=True)
            return False
        if current.sequence > meta["sequence"]:  # re-published with the same weights: the copy here is current
            store.write_meta(self.step_dir(step), {**meta, "sequence": current.sequence})
        return True

    def release(self, step: int) -> None:
        with self._lock:
            self._release(step)

    def _release(self, step: int) -> None:
        self._pinned[step] -= 1
        if self._pinned[step] <= 0:
            del self._pinned[step]

    def _build(self, step: int, listing: dict[int, protocol.Listed]) -> None:
        for manifest, section in self.plan(step, listing):
            try:
                self._apply(manifest, section)
            except checkpoint.DecodeError:
                if section.kind == "delta":
                    # The shards were verified, so the local base is what is wrong: drop it, and the next
                    # attempt plans from a keyframe.
                    logger.error(f"step_{section.base_step} on disk is damaged; deleting it")
                    shutil.rmtree(self.step_dir(section.base_step), ignore_errors=True)
                raise
        self._prune(keep=step)
        self._manifests = {
            key: m for key, m in self._manifests.items() if key[0] in listing and listing[key[0]].checksum == key[1]
        }

    def _prune(self, keep: int) -> None:
        steps = sorted(self.local_steps())
        doomed = [s for s in steps if s != keep][: max(0, len(steps) - self.config.keep_steps)]
        with self._lock:
            doomed = [s for s in doomed if s not in self._pinned]
        for old in doomed:
            shutil.rmtree(self.step_dir(old), ignore_errors=True)
        for folder in self.downloads.iterdir():
            if folder.name.startswith("v") and folder.name[1:].isdigit() and int(folder.name[1:]) <= keep:
                shutil.rmtree(folder, ignore_errors=True)
