"""Versions on disk: checkpoint encode/decode, manifest framing, the SHARDCAST listing, origin bookkeeping."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from safetensors.torch import save_file

from composer_prime.relay import checkpoint, protocol
from composer_prime.relay.manifest import ManifestError, checkpoint_digest, frame_manifest, parse_manifest
from composer_prime.relay.origin import Origin, OriginConfig
from tests.support.relay_pki import RUN_ID, signing_keys
from tests.support.rl_checkpoints import make_run
from tests.support.vllm_admin import dir_digests

KEY = Ed25519PrivateKey.generate()
PUBLIC = KEY.public_key()


def _decode(manifest, kind: str, version_dir: Path, base_dir: Path | None, out: Path) -> dict[str, str]:
    section = manifest.section(kind)
    out.mkdir(parents=True)
    reader = protocol.SectionReader(manifest, section, lambda i: version_dir / protocol.shard_name(i))
    base = checkpoint.scan_checkpoint(base_dir) if base_dir else None
    return checkpoint.decode_files(section.files, reader, base, out, manifest.chunk_elements)


def _write(step_dir: Path, files: dict[str, dict[str, torch.Tensor]], extra: dict[str, str] | None = None) -> Path:
    step_dir.mkdir(parents=True)
    for name, tensors in files.items():
        save_file(tensors, step_dir / name, metadata={"format": "pt"})
    for name, text in (extra or {}).items():
        (step_dir / name).write_text(text)
    (step_dir / "STABLE").touch()
    return step_dir


def test_layout_changes_between_steps_round_trip(tmp_path):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(300, 70, generator=g).bfloat16()
    old = _write(
        tmp_path / "step_0",
        {"a.safetensors": {"w": w, "gone": torch.ones(3)}, "b.safetensors": {"norm": torch.ones(70).bfloat16()}},
        {"index.json": '{"weight_map": {}}'},
    )
    w2 = w.clone()
    w2[5, :10] += 0.5
    new = _write(
        tmp_path / "step_1",
        {
            "a.safetensors": {"norm": torch.ones(70).bfloat16()},  # moved to another file
            "b.safetensors": {"w": w2, "fresh": torch.arange(9.0), "empty": torch.zeros(0, 4).bfloat16()},
            "c.safetensors": {"gone": torch.ones(3, dtype=torch.float64)},  # same name, new dtype
        },
        {"index.json": '{"weight_map": {"w": "b"}}'},
    )
    base = protocol.Base(0, old, "0" * 64)
    manifest, listed = protocol.encode_version(
        new,
        1,
        base,
        keyframe=True,
        out_root=tmp_path / "pub",
        shard_size=4096,
        chunk_elements=5000,
        level=3,
        key=KEY,
        sequence=1,
        run_id="r",
    )
    assert [s.kind for s in manifest.sections] == ["delta", "full"]
    version = tmp_path / "pub" / "v1"
    assert listed.num_shards == len(list(version.iterdir())) == len(manifest.shards) + 1
    assert parse_manifest((version / protocol.shard_name(listed.num_shards)).read_bytes(), PUBLIC) == manifest
    delta = manifest.section("delta")
    tensors = {t.name: t for f in delta.files for t in f.tensors}
    assert tensors["w"].changed == 10 and len(tensors["w"].chunks) == 5  # 21000 elements in chunks of 5000
    assert tensors["norm"].changed == 0
    for kind, base_dir in (("delta", old), ("full", None)):
        out = tmp_path / f"out-{kind}"
        digests = _decode(manifest, kind, version, base_dir, out)
        assert dir_digests(out) == dir_digests(new)  # byte for byte
        assert checkpoint_digest(digests) == manifest.digest


def test_wrong_base_is_caught_per_tensor(tmp_path):
    steps = make_run(tmp_path / "run", 2, lr=1e-5)
    manifest, _ = protocol.encode_version(
        steps[2], 2, protocol.Base(1, steps[1], "x"), False, tmp_path / "pub", 1 << 20, 1 << 20, 3, KEY, 1, "r"
    )
    with pytest.raises(checkpoint.DecodeError, match="does not match its published digest"):
        _decode(manifest, "delta", tmp_path / "pub" / "v2", steps[0], tmp_path / "out")


def test_manifest_framing_detects_damage(tmp_path):
    steps = make_run(tmp_path / "run", 0)
    manifest, listed = protocol.encode_version(
        steps[0], 0, None, True, tmp_path / "pub", 1 << 20, 1 << 20, 3, KEY, 1, "r"
    )
    framed = frame_manifest(manifest, KEY)
    assert (tmp_path / "pub" / "v0" / protocol.shard_name(listed.num_shards)).read_bytes() == framed
    middle = len(framed) // 2
    for bad, message in [
        (framed[:-1], "framing says"),
        (framed[:middle] + bytes([framed[middle] ^ 1]) + framed[middle + 1 :], "checksum mismatch"),
        (b"PK\x03\x04" + framed[4:], "not a composer-prime-delta/1 manifest"),
        (b"", "not a"),
    ]:
        with pytest.raises(ManifestError, match=message):
            parse_manifest(bad, PUBLIC)


def test_listing_is_shardcast_compatible():
    from shardcast.utils import parse_distribution_file

    listed = [protocol.Listed(12, "ab" * 32, 3), protocol.Listed(7, "cd" * 32, 1)]
    text = protocol.format_distribution(listed)
    assert text.splitlines()[0].startswith("v7: ")  # oldest first, like shardcast writes it
    assert protocol.parse_distribution(text) == {7: listed[1], 12: listed[0]}
    # shardcast's own reader (what `shardcast-middle` and `ClientNode` use) understands it.
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(text)
        f.flush()
        theirs = parse_distribution_file(f.name)
    checksum, _, shards = theirs["v12"].partition("|")
    assert (checksum, int(shards)) == ("ab" * 32, 3)
    with pytest.raises(protocol.ProtocolError, match="line 2"):
        protocol.parse_distribution("v1: " + "a" * 64 + "|1\nv2: nonsense\n")


def public_key(tmp_path: Path):
    from composer_prime.relay.signing import load_verify_key

    return load_verify_key(signing_keys(tmp_path / "keys")[1], "verify_key_file")


def _origin(tmp_path: Path, **overrides) -> Origin:
    config = {
        "output_dir": tmp_path / "run",
        "data_dir": tmp_path / "pub",
        "host": "127.0.0.1",
        "port": 0,
        "keyframe_interval": 3,
        "keep_keyframes": 1,
        "shard_size": 4096,
        "signing_key_file": signing_keys(tmp_path / "keys")[0],
        "run_id": RUN_ID,
    }
    return Origin(OriginConfig(**{**config, **overrides}))


def test_origin_keyframe_cadence_retention_and_restart(tmp_path):
    steps = make_run(tmp_path / "run", 4)
    origin = _origin(tmp_path)
    for step in origin.pending()[:3]:
        origin.publish(step)
    # A restarted origin continues the chain from its base copy instead of starting with a keyframe.
    origin = _origin(tmp_path)
    assert origin.pending() == [3, 4]
    shutil.rmtree(steps[0])  # the trainer cleans old steps; the origin's base copy does not depend on them
    for step in origin.pending():
        origin.publish(step)
    listing = protocol.parse_distribution((tmp_path / "pub" / "distribution.txt").read_text())
    assert sorted(listing) == [3, 4]  # keep_keyframes=1: the latest keyframe (v3) onward
    manifests = {
        step: parse_manifest(
            (tmp_path / "pub" / f"v{step}" / protocol.shard_name(entry.num_shards)).read_bytes(), public_key(tmp_path)
        )
        for step, entry in listing.items()
    }
    assert {step: m.keyframe for step, m in manifests.items()} == {3: True, 4: False}
    assert manifests[4].section("delta").base_digest == manifests[3].digest
    assert json.loads((tmp_path / "pub" / ".base" / ".base.json").read_text())["digest"] == manifests[4].digest
    assert sorted(p.name for p in (tmp_path / "pub").iterdir() if p.name.startswith("v")) == ["v3", "v4"]


def test_origin_skips_a_step_the_trainer_deleted(tmp_path):
    steps = make_run(tmp_path / "run", 2)
    origin = _origin(tmp_path)
    origin.publish(0)
    shutil.rmtree(steps[1])
    assert origin.publish(1) is None
    origin.publish(2)
    manifest_shard = max((tmp_path / "pub" / "v2").iterdir())
    assert parse_manifest(manifest_shard.read_bytes(), public_key(tmp_path)).section("delta").base_step == 0


def test_origin_refuses_an_output_dir_that_does_not_exist(tmp_path):
    # A missing output_dir used to be watched forever; the origin now refuses it at start.
    import pydantic

    from composer_prime.relay.origin import OriginConfig

    key, _ = signing_keys(tmp_path / "keys")
    with pytest.raises(pydantic.ValidationError, match="is not an existing directory; give PRIME-RL's output_dir"):
        OriginConfig(output_dir=tmp_path / "missing", data_dir=tmp_path / "data", signing_key_file=key, run_id="r")
    config = OriginConfig(output_dir=tmp_path, data_dir=tmp_path / "data", signing_key_file=key, run_id="r")
    assert config.output_dir == tmp_path


def test_a_restarted_origin_withdraws_versions_its_key_does_not_sign(tmp_path):
    """After a key rotation, clients holding the new public key would refuse every version signed with the old one:
    the origin withdraws them and starts a new keyframe chain under the new key."""
    from composer_prime.relay.signing import load_verify_key

    make_run(tmp_path / "run", 2)
    origin = _origin(tmp_path)
    for step in origin.pending()[:2]:
        origin.publish(step)
    new_private, new_public = signing_keys(tmp_path / "new-keys")
    origin = _origin(tmp_path, signing_key_file=new_private)
    assert origin.listing == {} and origin.pending() == [0, 1, 2]
    origin.publish(0)  # a keyframe (no base), signed with the new key
    listed = origin.listing[0]
    shard = (tmp_path / "pub" / "v0" / protocol.shard_name(listed.num_shards)).read_bytes()
    manifest = parse_manifest(shard, load_verify_key(new_public, "verify_key_file"))
    assert manifest.keyframe and manifest.section("delta") is None


def test_the_origin_s_sequence_is_recorded_and_never_goes_back(tmp_path):
    """Sequences order publications whatever their step: recorded (atomically) before a manifest carries one, and a
    restarted origin continues above the record even when the clock is behind it."""
    make_run(tmp_path / "run", 1)
    origin = _origin(tmp_path)
    origin.publish(0)
    recorded = int((tmp_path / "pub" / ".sequence").read_text())
    assert recorded == origin.sequence >= 1
    ahead = time.time_ns() + 10**18  # as if the clock had gone back by about 30 years since the record
    (tmp_path / "pub" / ".sequence").write_text(str(ahead))
    origin = _origin(tmp_path)
    origin.publish(1)
    shard = tmp_path / "pub" / "v1" / protocol.shard_name(origin.listing[1].num_shards)
    assert parse_manifest(shard.read_bytes(), public_key(tmp_path)).sequence == ahead + 1
    assert int((tmp_path / "pub" / ".sequence").read_text()) == ahead + 1
