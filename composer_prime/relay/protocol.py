"""SHARDCAST's relay protocol, and writing / reading one version in it.

SHARDCAST (`shardcast` 0.3.2 on PyPI, PrimeIntellect-ai/shardcast) serves a directory over plain HTTP GET:

- `distribution.txt`: one line per available version, `v{N}: {blake3 of the version's payload}|{number of shards}`,
  oldest first;
- `v{N}/shard_00001.bin` ... `v{N}/shard_{n:05d}.bin`: the payload, cut into consecutive pieces;
- `data1.bin`: a small file its downloader fetches from every server at start-up to measure bandwidth.

Relays (`shardcast-middle`) mirror the listing and the shard files and serve them again, so anything that keeps this
layout can be fanned out through a SHARDCAST relay tree. Our payload follows it exactly; the version name is
`v{step}` of the trainer step, and the payload is a delta archive (body shards + a manifest shard, see `manifest.py`)
instead of one opaque file. Every write here is atomic: a version is built in a dot-named temp folder and renamed into
place, and `distribution.txt` is replaced by rename, so an HTTP reader never sees a half-written version or listing.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import blake3
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from composer_prime.atomic import fsync_dir
from composer_prime.relay import checkpoint
from composer_prime.relay.manifest import Blob, Manifest, Section, ShardEntry, checkpoint_digest, frame_manifest

DISTRIBUTION_FILE = "distribution.txt"
PROBE_FILE = "data1.bin"
_LINE = re.compile(r"^v(\d{1,18}):\s*([0-9a-f]{64})\|(\d{1,9})$")
"""A listing line; a step of more than 18 digits is no trainer's (and `int()` of 5000 digits raises past Python's
digit limit: one line from a hostile mirror must be a refused listing, not a dead client)."""


class ProtocolError(ValueError):
    """A listing or version that does not follow the protocol."""


@dataclass(frozen=True)
class Listed:
    step: int
    checksum: str  # blake3 of the concatenated shards
    num_shards: int


def version_name(step: int) -> str:
    return f"v{step}"


def shard_name(index: int) -> str:
    """1-based shard file name, as `shardcast.utils.get_shard_filename(index - 1)`."""
    return f"shard_{index:05d}.bin"


def format_distribution(versions: list[Listed]) -> str:
    return "".join(
        f"{version_name(v.step)}: {v.checksum}|{v.num_shards}\n" for v in sorted(versions, key=lambda v: v.step)
    )


def parse_distribution(text: str) -> dict[int, Listed]:
    """step -> listing entry. Raises `ProtocolError` naming the first bad line."""
    versions = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _LINE.match(line.strip())
        if match is None:
            raise ProtocolError(
                f"{DISTRIBUTION_FILE} line {number} is not 'v<step>: <blake3>|<shards>': {line[:120]!r}"
            )
        step, checksum, shards = int(match[1]), match[2], int(match[3])
        if shards < 1:
            raise ProtocolError(f"{DISTRIBUTION_FILE} line {number}: version v{step} lists {shards} shards")
        versions[step] = Listed(step, checksum, shards)
    return versions


class ShardWriter:
    """A `BlobSink` that appends blobs to `shard_00001.bin`, ... rolling over at `shard_size` bytes."""

    def __init__(self, folder: Path, shard_size: int):
        self.folder, self.shard_size = folder, shard_size
        self.shards: list[ShardEntry] = []
        self.payload_hash = blake3.blake3()
        self._file = None
        self._hash = None
        self._size = 0
        self.section_offset = 0

    def start_section(self) -> int:
        """Close the open shard so the next section starts on a fresh one; returns its 1-based first shard."""
        self._close()
        self.section_offset = 0
        return len(self.shards) + 1

    def write(self, blob: bytes) -> Blob:
        view = memoryview(blob)
        ref = Blob(offset=self.section_offset, length=len(view))
        while view:
            if self._file is None:
                self._file = (self.folder / shard_name(len(self.shards) + 1)).open("wb")
                self._hash, self._size = blake3.blake3(), 0
            piece = view[: self.shard_size - self._size]
            self._file.write(piece)
            self._hash.update(piece)
            self.payload_hash.update(piece)
            self._size += len(piece)
            view = view[len(piece) :]
            if self._size >= self.shard_size:
                self._close()
        self.section_offset += ref.length
        return ref

    def _close(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self.shards.append(ShardEntry(size=self._size, blake3=self._hash.hexdigest()))
            self._file = None

    def finish(self, manifest_bytes: bytes) -> Listed:
        """Write the manifest as the last shard; returns the payload's listing entry (step filled in by caller)."""
        self._close()
        index = len(self.shards) + 1
        with (self.folder / shard_name(index)).open("wb") as f:
            f.write(manifest_bytes)
            f.flush()
            os.fsync(f.fileno())
        self.payload_hash.update(manifest_bytes)
        return Listed(step=-1, checksum=self.payload_hash.hexdigest(), num_shards=index)


@dataclass(frozen=True)
class Base:
    step: int
    dir: Path
    digest: str


def encode_version(
    new_dir: Path,
    step: int,
    base: Base | None,
    keyframe: bool,
    out_root: Path,
    shard_size: int,
    chunk_elements: int,
    level: int,
    key: Ed25519PrivateKey,
    sequence: int,
    run_id: str,
    xor: bool = True,
    progress: checkpoint.Progress | None = None,
) -> tuple[Manifest, Listed]:
    """Build `out_root/v{step}` from `new_dir`: a delta section against `base` (if any), a full one if `keyframe`;
    the manifest carries `run_id` and `sequence` and is signed with `key`.

    The folder appears atomically; a leftover temp folder from a crash is replaced.
    """
    if base is None and not keyframe:
        raise ValueError(f"step {step}: a version with no base must be a keyframe")
    final = out_root / version_name(step)
    tmp = out_root / f".{version_name(step)}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    writer = ShardWriter(tmp, shard_size)
    sections, digest = [], None
    plans = ([("delta", base)] if base is not None else []) + ([("full", None)] if keyframe else [])
    for kind, section_base in plans:
        first = writer.start_section()
        index = checkpoint.scan_checkpoint(section_base.dir) if section_base else None
        files, hashes = checkpoint.encode_files(new_dir, index, writer, chunk_elements, level, xor, progress)
        size = writer.section_offset
        writer.start_section()
        digest = checkpoint_digest(hashes)
        sections.append(
            Section(
                kind=kind,
                base_step=section_base.step if section_base else None,
                base_digest=section_base.digest if section_base else None,
                first_shard=first,
                num_shards=len(writer.shards) - first + 1,
                size=size,
                files=files,
            )
        )
    manifest = Manifest(
        run_id=run_id,
        step=step,
        sequence=sequence,
        digest=digest,
        keyframe=keyframe,
        chunk_elements=chunk_elements,
        sections=sections,
        shards=writer.shards,
    )
    listed = writer.finish(frame_manifest(manifest, key))
    fsync_dir(tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return manifest, Listed(step, listed.checksum, listed.num_shards)


class SectionReader:
    """Reads a section's blobs out of its shard files (already verified) by section offset."""

    def __init__(self, manifest: Manifest, section: Section, shard_path: Callable[[int], Path]):
        self.spans: list[tuple[int, int, Path]] = []  # (section offset, size, path)
        offset = 0
        for index in range(section.first_shard, section.first_shard + section.num_shards):
            size = manifest.shards[index - 1].size
            self.spans.append((offset, size, shard_path(index)))
            offset += size
        if offset != section.size:
            raise ProtocolError(
                f"section '{section.kind}' spans {offset} shard bytes, its manifest says {section.size}"
            )

    def __call__(self, blob: Blob) -> bytes:
        if blob.offset + blob.length > (self.spans[-1][0] + self.spans[-1][1] if self.spans else 0):
            raise ProtocolError(f"blob at {blob.offset}+{blob.length} runs past the end of its section")
        out = bytearray()
        for start, size, path in self.spans:
            lo, hi = max(blob.offset, start), min(blob.offset + blob.length, start + size)
            if lo < hi:
                with path.open("rb") as f:
                    f.seek(lo - start)
                    out += f.read(hi - lo)
        if len(out) != blob.length:
            raise ProtocolError(f"blob at {blob.offset}+{blob.length}: shard files hold only {len(out)} bytes of it")
        return bytes(out)
