"""What a client accepts: the origin's signature on every manifest, and plans newer than it served and in order."""

from __future__ import annotations

import json
import struct

import blake3
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from composer_prime.relay import protocol, signing, trust
from composer_prime.relay.manifest import MAGIC, frame_manifest, parse_manifest
from composer_prime.relay.transport import Refused
from tests.support.rl_checkpoints import make_run

KEY = Ed25519PrivateKey.generate()


def _frame(body: bytes, signature: bytes = b"") -> bytes:
    return MAGIC + struct.pack("<Q", len(body)) + body + blake3.blake3(body).digest() + signature


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """v0 (keyframe), v1 and v2 (deltas) of a real run, signed with KEY, sequences 10, 20, 30."""
    tmp = tmp_path_factory.mktemp("chain")
    steps = make_run(tmp / "run", 2)
    manifests, base = [], None
    for step, step_dir in enumerate(steps):
        manifest, _ = protocol.encode_version(
            step_dir, step, base, base is None, tmp / "pub", 1 << 20, 1 << 20, 3, KEY, 10 * (step + 1), "r"
        )
        manifests.append(manifest)
        base = protocol.Base(step, step_dir, manifest.digest)
    return manifests


def test_only_the_trusted_key_s_signature_passes(chain):
    framed = frame_manifest(chain[1], KEY)
    assert parse_manifest(framed, KEY.public_key()) == chain[1]
    body = framed[len(MAGIC) + 8 : -32 - signing.SIGNATURE_BYTES]
    with pytest.raises(signing.SignatureError, match="unsigned"):
        parse_manifest(_frame(body), KEY.public_key())
    with pytest.raises(signing.SignatureError, match="does not verify against verify_key_file"):
        parse_manifest(framed, Ed25519PrivateKey.generate().public_key())  # a forger's own key
    # Rewriting the JSON and recomputing its blake3 keeps the framing whole; the signature no longer matches.
    forged = json.loads(body)
    forged["digest"] = "0" * 64
    with pytest.raises(signing.SignatureError, match="does not verify"):
        parse_manifest(_frame(json.dumps(forged).encode(), framed[-signing.SIGNATURE_BYTES :]), KEY.public_key())


def test_a_publication_older_than_the_one_served_is_refused():
    served = trust.Served(run_id="r", step=5, sequence=50, digest="d")
    trust.check_not_replayed(5, 50, served)  # the same publication again (PRIME-RL's retry): fine
    trust.check_not_replayed(2, 60, served)  # a re-published earlier step (trainer restart): newer, fine
    trust.check_not_replayed(1, 1, None)  # nothing served yet
    with pytest.raises(trust.Stale, match="older than step_5 .* a replayed publication"):
        trust.check_not_replayed(6, 49, served)


def test_a_plan_must_chain_in_order(chain):
    v0, v1, v2 = chain
    trust.check_chain(2, [(v0, v0.section("full")), (v1, v1.section("delta")), (v2, v2.section("delta"))])
    trust.check_chain(2, [(v2, v2.section("delta"))])  # the base is on the client already
    with pytest.raises(Refused, match="does not end at v2"):
        trust.check_chain(2, [(v1, v1.section("delta"))])
    with pytest.raises(Refused, match="v2 .* does not follow v0"):  # v1 skipped
        trust.check_chain(2, [(v0, v0.section("full")), (v2, v2.section("delta"))])
    older_v1 = v1.model_copy(update={"sequence": 35})  # v1 from a later publication than v2: out of order
    with pytest.raises(Refused, match="does not follow v1"):
        trust.check_chain(2, [(older_v1, v1.section("delta")), (v2, v2.section("delta"))])


def test_the_served_record_survives_restarts_and_damage_is_not_a_reset(tmp_path):
    assert trust.load_served(tmp_path) is None
    trust.save_served(tmp_path, trust.Served("r", 3, 30, "abc"))
    assert trust.load_served(tmp_path) == trust.Served("r", 3, 30, "abc")
    (tmp_path / trust.SERVED_FILE).write_text("{not json")
    with pytest.raises(Refused, match="served.json is unreadable"):
        trust.load_served(tmp_path)
