"""Attacks on the weight relay over real HTTP(S) servers on 127.0.0.1: each is refused and nothing reaches vLLM.

The origin, the client's admin proxy and vLLM's stand-in run in this process (aiohttp and http.server threads); the
tap (tests/support/relay_procs.py) sits where the network is and plays the attacker: it answers in the origin's
place (`upstream` switched to a forged origin or a replayed copy) or rewrites what passes through. After every
refusal the honest path still builds the trainer's weights bit for bit.
"""

from __future__ import annotations

import http.client as http_client
import json
import shutil
import struct
import threading
import time
from pathlib import Path

import blake3
import pytest
from aiohttp import web

from composer_prime.process.ports import free_port
from composer_prime.relay import protocol
from composer_prime.relay.client import ClientConfig, Fetcher
from composer_prime.relay.http import serve_in_thread
from composer_prime.relay.manifest import MAGIC
from composer_prime.relay.origin import Origin, OriginConfig, static_app
from composer_prime.relay.proxy import Proxy, RelayClientConfig
from composer_prime.relay.transport import RelayError, server_tls
from tests.support.relay_pki import ADMIN_TOKEN, RUN_ID, admin_token_file, signing_keys, tls_files
from tests.support.relay_procs import Tap, http
from tests.support.rl_checkpoints import ModelShape, RLTrainer, make_run, write_broadcast_step
from tests.support.vllm_admin import AdminStandIn, dir_digests

pytestmark = pytest.mark.timeout(120)


def publish(run: Path, data_dir: Path, key: Path, **options) -> Origin:
    config = dict(
        output_dir=run,
        data_dir=data_dir,
        signing_key_file=key,
        host="127.0.0.1",
        port=0,
        keyframe_interval=10,
        shard_size=16384,
        run_id=RUN_ID,
    )
    origin = Origin(OriginConfig(**{**config, **options}))
    for step in origin.pending():
        origin.publish(step)
    return origin


class Client:
    """The relay client as `composer-prime relay client` runs it (no prefetch), in this process."""

    def __init__(self, tmp: Path, servers: str, vllm: str, public_key: Path, **options):
        # A step no server's answer builds is waited for (a hostile mirror costs its turn, not the step) until
        # wait_for_version_s; short here, so each refusal is a 502 within seconds.
        options.setdefault("wait_for_version_s", 4.0)
        self.config = RelayClientConfig(
            servers=servers,
            store_dir=tmp / "store",
            verify_key_file=public_key,
            upstream=vllm,
            run_id=RUN_ID,
            admin_token_file=admin_token_file(tmp / "client-token"),
            host="127.0.0.1",
            port=0,
            prefetch=False,
            **options,
        )
        self.fetcher = Fetcher(self.config)
        self.server = Proxy(self.config, self.fetcher).serve()
        self.url = self.server.url

    def update(self, step_dir: Path, token: str | None = ADMIN_TOKEN) -> tuple[int, str]:
        status, body = http("POST", f"{self.url}/update_weights", {"weight_dir": str(step_dir)}, 120, token)
        return status, body.decode()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop()


def body_shards_fetched(tap: Tap, data_dir: Path) -> list[str]:
    """Paths the tap served that hold weights (every shard but each version's manifest shard)."""
    listing = protocol.parse_distribution((data_dir / protocol.DISTRIBUTION_FILE).read_text())
    manifests = {f"v{s}/{protocol.shard_name(v.num_shards)}" for s, v in listing.items()}
    return [p for p in tap.served if p.endswith(".bin") and "/" in p and p not in manifests]


def reframe(shard: bytes, edit) -> bytes:
    """What a man in the middle can do to a manifest shard: edit the JSON, recompute its blake3 and keep the
    signature it cannot make."""
    head = len(MAGIC) + 8
    (length,) = struct.unpack("<Q", shard[len(MAGIC) : head])
    body = json.dumps(edit(json.loads(shard[head : head + length]))).encode()
    return MAGIC + struct.pack("<Q", len(body)) + body + blake3.blake3(body).digest() + shard[head + length + 32 :]


@pytest.fixture
def site(tmp_path):
    """The trainer's run (steps 0-2), its origin serving them, the tap in front and vLLM's stand-in."""
    steps = make_run(tmp_path / "run", 2, max_shard_bytes=200_000)
    private, public = signing_keys(tmp_path / "keys")
    origin = publish(tmp_path / "run", tmp_path / "pub", private)
    served = origin.serve()
    with Tap(served.url) as tap, AdminStandIn() as vllm:
        yield steps, public, tap, vllm
    served.stop()


def test_a_forged_origin_with_consistent_versions_is_refused(site, tmp_path):
    steps, public, tap, vllm = site
    # The forger trains its own weights and publishes them with a complete, self-consistent origin of its own.
    make_run(tmp_path / "forged-run", 2, lr=1e-4, seed=7, max_shard_bytes=200_000)
    forged_key, _ = signing_keys(tmp_path / "forger")
    forged = publish(tmp_path / "forged-run", tmp_path / "forged-pub", forged_key).serve()
    honest = tap.upstream
    with Client(tmp_path, tap.url, vllm.url, public) as client:
        assert client.update(steps[1]) == (200, json.dumps({"status": "ok"}))
        tap.upstream = forged.url  # the forger answers at the origin's address from now on
        tap.served.clear()
        status, body = client.update(steps[2])
        assert status == 502 and "does not verify against verify_key_file" in body, body
        assert body_shards_fetched(tap, tmp_path / "forged-pub") == []  # refused before a byte of weights
        # An unsigned version (an origin that does not sign, or a forgery without a key) is refused the same way.
        tap.upstream = honest
        manifest_path = f"v2/{protocol.shard_name(tap_listing(tap)[2].num_shards)}"
        tap.rewrite[manifest_path] = lambda data: data[:-64]
        status, body = client.update(steps[2])
        assert status == 502 and "unsigned" in body, body
        assert [Path(u.body["weight_dir"]).name for u in vllm.updates()] == ["step_1"]  # vLLM kept step 1
        assert not client.fetcher.step_dir(2).exists()
        del tap.rewrite[manifest_path]
        assert client.update(steps[2])[0] == 200
        assert vllm.updates()[-1].files == dir_digests(steps[2])  # bit for bit
    forged.stop()


def tap_listing(tap: Tap) -> dict[int, protocol.Listed]:
    return protocol.parse_distribution(http("GET", f"{tap.upstream}/distribution.txt")[1].decode())


def test_a_man_in_the_middle_rewriting_one_delta_is_refused(site, tmp_path):
    steps, public, tap, vllm = site
    listed = tap_listing(tap)[2]
    manifest_path = f"v2/{protocol.shard_name(listed.num_shards)}"
    delta_path = f"v2/{protocol.shard_name(1)}"

    def flip(data: bytes) -> bytes:
        return bytes([data[0] ^ 0x01]) + data[1:]

    tampered = flip(http("GET", f"{tap.upstream}/{delta_path}")[1])

    def point_manifest_at_the_tampered_shard(manifest: dict) -> dict:
        manifest["shards"][0]["blake3"] = blake3.blake3(tampered).hexdigest()
        return manifest

    with Client(tmp_path, tap.url, vllm.url, public) as client:
        assert client.update(steps[1])[0] == 200
        # Consistent rewrite: the delta and the manifest's record of it both changed; the signature cannot follow.
        tap.rewrite = {delta_path: flip, manifest_path: lambda d: reframe(d, point_manifest_at_the_tampered_shard)}
        tap.served.clear()
        status, body = client.update(steps[2])
        assert status == 502 and "does not verify" in body, body
        assert delta_path not in tap.served
        # Refused each time it is offered while the client waits (wait_for_version_s) for an honest publication:
        # the manifest only, never a byte of weights.
        assert tap.count(manifest_path) >= 1 and delta_path not in tap.served
        # The delta alone rewritten: its blake3 in the signed manifest no longer matches, every attempt.
        tap.rewrite = {delta_path: flip}
        status, body = client.update(steps[2])
        assert status == 502 and "could not be fetched intact" in body, body
        assert len(vllm.updates()) == 1 and not client.fetcher.step_dir(2).exists()
        tap.rewrite = {}
        assert client.update(steps[2])[0] == 200
        assert vllm.updates()[-1].files == dir_digests(steps[2])


def test_a_replayed_older_publication_is_refused(site, tmp_path):
    steps, public, tap, vllm = site
    shutil.copytree(tmp_path / "pub", tmp_path / "recorded")  # an attacker records v0-v2 as published
    with Client(tmp_path, tap.url, vllm.url, public, wait_for_version_s=2) as client:
        assert client.update(steps[2])[0] == 200
        # The trainer restarts from step 0 and writes steps 1 and 2 again, with other weights; the origin
        # re-publishes them (newer sequences) and the orchestrator asks for step 2 again.
        trainer = RLTrainer(ModelShape(), 1e-5, seed=3)
        for step in (1, 2):
            trainer.step()
            write_broadcast_step(trainer.bf16_state_dict(), tmp_path / "run" / "broadcasts", step, 200_000)
        origin = publish(tmp_path / "run", tmp_path / "pub", signing_keys(tmp_path / "keys")[0])
        assert not origin.pending()
        assert client.update(steps[2])[0] == 200
        current = dir_digests(steps[2])
        assert vllm.updates()[-1].files == current
        # The attacker answers as the origin with the recorded, validly signed, older publication of step 2.
        recorded = serve_in_thread(static_app(tmp_path / "recorded"), "127.0.0.1", 0, "recorded-origin")
        tap.upstream = recorded.url
        tap.served.clear()
        assert client.update(steps[2])[0] == 200  # the copy here is newer: it stays
        assert vllm.updates()[-1].files == current
        shutil.rmtree(client.fetcher.step_dir(2))  # lost on this host: it would have to come from the relay
        status, body = client.update(steps[2])
        assert status == 502 and "a replayed publication" in body and "no newer publication of v2" in body, body
        assert body_shards_fetched(tap, tmp_path / "recorded") == []
        assert vllm.updates()[-1].files == current and not client.fetcher.step_dir(2).exists()
        recorded.stop()
    # A restarted client remembers what it served: the record is on disk, not in memory.
    restarted = Fetcher(client.config).served
    assert restarted is not None and (restarted.step, restarted.sequence) == (2, origin.sequence)


def test_tls_origin_builds_bit_exact_and_clients_never_fall_back_to_plain_http(tmp_path):
    steps = make_run(tmp_path / "run", 1, max_shard_bytes=200_000)
    private, public = signing_keys(tmp_path / "keys")
    pki = tls_files(tmp_path / "tls")
    origin = publish(
        tmp_path / "run",
        tmp_path / "pub",
        private,
        tls_cert_file=pki.cert,
        tls_key_file=pki.key,
        tls_client_ca_file=pki.ca,
    )
    served = origin.serve()
    assert served.url.startswith("https://")

    def fetcher(name: str, server: str, **tls) -> Fetcher:
        return Fetcher(
            ClientConfig(
                servers=server,
                store_dir=tmp_path / name,
                verify_key_file=public,
                run_id=RUN_ID,
                retries=1,
                wait_for_version_s=1,
                **tls,
            )
        )

    # A listing that cannot be fetched is waited for (wait_for_version_s), then reported with the last error.
    refused = (RelayError, TimeoutError)
    mutual = {"tls_ca_file": pki.ca, "tls_cert_file": pki.client_cert, "tls_key_file": pki.client_key}
    try:
        assert dir_digests(fetcher("honest", served.url, **mutual).ensure_step(1)) == dir_digests(steps[1])
        # Without a client certificate the origin does not answer (mutual TLS): no weights for strangers.
        with pytest.raises(refused, match="SSL|certificate|Server disconnected without sending a response"):
            fetcher("stranger", served.url, tls_ca_file=pki.ca).ensure_step(1)
        # The origin's address answered in plain HTTP (same content): the TLS client does not speak it.
        plain = serve_in_thread(static_app(tmp_path / "pub"), "127.0.0.1", 0, "plain")
        with pytest.raises(refused, match="SSL|TLS|Connect"):
            fetcher("plain", plain.url.replace("http://", "https://"), **mutual).ensure_step(1)
        # A TLS server with a valid certificate that sends clients to a plain-HTTP copy: the redirect is not followed.
        redirector = web.Application()

        async def to_plain(request: web.Request) -> web.Response:
            raise web.HTTPFound(f"{plain.url}{request.path}")

        redirector.router.add_get("/{path:.*}", to_plain)
        bouncer = serve_in_thread(redirector, "127.0.0.1", 0, "redirect", server_tls(pki.cert, pki.key, None))
        with pytest.raises(refused, match="redirect to http://.* not followed"):
            fetcher("redirected", bouncer.url, **mutual).ensure_step(1)
        # An impostor with a certificate from another CA.
        other = tls_files(tmp_path / "other-tls", ca_name="impostor CA")
        impostor = serve_in_thread(
            static_app(tmp_path / "pub"), "127.0.0.1", 0, "impostor", server_tls(other.cert, other.key, None)
        )
        with pytest.raises(refused, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            fetcher("impostor", impostor.url, **mutual).ensure_step(1)
        for name in ("stranger", "plain", "redirected", "impostor"):
            assert not list((tmp_path / name / "steps").glob("step_*")), name
        for stop in (plain, bouncer, impostor):
            stop.stop()
        # Configurations that would speak plain HTTP with TLS configured are refused at load, naming the fix.
        with pytest.raises(ValueError, match="tls_ca_file = .* plain http://; write them as https://"):
            ClientConfig(
                servers="http://127.0.0.1:1",
                store_dir=tmp_path / "x",
                verify_key_file=public,
                run_id=RUN_ID,
                tls_ca_file=pki.ca,
            )
        with pytest.raises(ValueError, match="mix https:// and http://"):
            ClientConfig(
                servers="https://127.0.0.1:1,http://127.0.0.1:2",
                store_dir=tmp_path / "x",
                verify_key_file=public,
                run_id=RUN_ID,
            )
    finally:
        served.stop()


def test_admin_routes_need_the_orchestrators_token(site, tmp_path, monkeypatch):
    steps, public, tap, vllm = site
    with Client(tmp_path, tap.url, vllm.url, public) as client:
        tap.served.clear()
        for token in (None, "wrong-token-0123456789abcdef", ADMIN_TOKEN + "x", ADMIN_TOKEN[:-1]):
            for method, route, body in (
                ("POST", "/pause", None),
                ("POST", "/update_weights", {"weight_dir": str(steps[1])}),
                ("POST", "/resume", None),
                ("POST", "/load_lora_adapter", {"lora_path": str(steps[1])}),
                ("GET", "/v1/models", None),
            ):
                status, reply = http(method, client.url + route, body, token=token)
                assert status == 401 and "missing or wrong admin token" in reply.decode(), (token, route, reply)
        assert vllm.calls == [] and tap.served == []  # nothing forwarded, nothing fetched
        assert http("GET", client.url + "/health", token=None)[0] == 200  # readiness probes need no token
        assert http("POST", client.url + "/pause", token=ADMIN_TOKEN)[0] == 200
        assert client.update(steps[1])[0] == 200
        assert vllm.updates()[-1].files == dir_digests(steps[1])
        # The token reaches vLLM as the orchestrator sent it (vLLM may check the same key).
        assert vllm.updates()[-1].headers["Authorization"] == f"Bearer {ADMIN_TOKEN}"
    assert client.config.host == "127.0.0.1" == RelayClientConfig.model_fields["host"].default
    # From an environment variable instead of a file; a missing, short or doubly given token is refused at load.
    base = dict(servers=tap.url, store_dir=tmp_path / "s", verify_key_file=public, upstream=vllm.url, run_id=RUN_ID)
    monkeypatch.setenv("RELAY_ADMIN_TOKEN", ADMIN_TOKEN)
    assert RelayClientConfig(**base, admin_token_env="RELAY_ADMIN_TOKEN").admin_token_env == "RELAY_ADMIN_TOKEN"
    monkeypatch.setenv("SHORT", "abc")
    for extra, message in (
        ({}, "set exactly one"),
        ({"admin_token_env": "RELAY_ADMIN_TOKEN", "admin_token_file": tmp_path / "t"}, "set exactly one"),
        ({"admin_token_env": "SHORT"}, "admin_token_env = 'SHORT' gives a token of 3 characters"),
        ({"admin_token_env": "UNSET_VARIABLE"}, "gives a token of 0 characters"),
        ({"admin_token_file": tmp_path / "missing"}, "admin_token_file = .* cannot be read"),
    ):
        with pytest.raises(ValueError, match=message):
            RelayClientConfig(**base, **extra)


def raw(url: str, method: str, path: str, body: dict | None = None, token: str = ADMIN_TOKEN) -> tuple[int, str]:
    """One request with `path` sent exactly as spelled (urllib would normalise some spellings)."""
    host, port = url.removeprefix("http://").split(":")
    connection = http_client.HTTPConnection(host, int(port), timeout=60)
    try:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        connection.request(method, path, body=data, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_the_admin_proxy_forwards_only_its_own_routes_and_loads_only_verified_steps(site, tmp_path):
    """A token holder tries vLLM's runtime LoRA route, other spellings of the weight routes and routes the relay
    does not serve: each either reaches the verifying handler (vLLM gets the relay's own copy of a signed step, at
    the canonical route) or is a 403 naming the route, and nothing else reaches vLLM."""
    steps, public, tap, vllm = site
    evil = tmp_path / "evil" / "step_1"  # the attacker's own weights, named like a broadcast step
    evil.mkdir(parents=True)
    (evil / "model.safetensors").write_bytes(b"unsigned")
    with Client(tmp_path, tap.url, vllm.url, public) as client:
        local = client.fetcher.step_dir(1).as_posix()
        mapped = [
            ("/update_weights/", {"weight_dir": str(evil)}, "/update_weights", "weight_dir"),
            ("//update_weights", {"weight_dir": str(evil)}, "/update_weights", "weight_dir"),
            ("/update_weights//", {"weight_dir": str(evil)}, "/update_weights", "weight_dir"),
            ("/update%5Fweights", {"weight_dir": str(evil)}, "/update_weights", "weight_dir"),
            ("/v1/load_lora_adapter", {"lora_name": "a", "lora_path": str(evil)}, "/v1/load_lora_adapter", "lora_path"),
            (
                "/v1//load_lora_adapter/",
                {"lora_name": "a", "lora_path": str(evil)},
                "/v1/load_lora_adapter",
                "lora_path",
            ),
            ("/load_lora_adapter", {"lora_name": "a", "lora_path": str(evil), "load_inplace": True}, None, "lora_path"),
        ]
        for path, body, route, field in mapped:
            before = len(vllm.calls)
            status, reply = raw(client.url, "POST", path, body)
            assert status in (200, 404), (path, status, reply)  # the stand-in has no LoRA routes: vLLM's answer
            [call] = vllm.calls[before:]
            assert call.path == (route or path) and call.body[field] == local, (path, call)
        assert vllm.updates()[-1].files == dir_digests(steps[1])  # the signed step, not the attacker's
        before = len(vllm.calls)
        refused = [
            ("POST", "/UPDATE_WEIGHTS", {"weight_dir": str(evil)}, "the route is /update_weights"),
            ("POST", "/Update_Weights/", {"weight_dir": str(evil)}, "the route is /update_weights"),
            ("POST", "/V1/Load_Lora_Adapter", {"lora_path": str(evil)}, "the route is /v1/load_lora_adapter"),
            ("POST", "/v1/../update_weights", {"weight_dir": str(evil)}, "'.' or '..' segments"),
            ("POST", "/update_weights/.", {"weight_dir": str(evil)}, "'.' or '..' segments"),
            ("POST", "/init_broadcaster", {"host": "10.0.0.9", "port": 29500}, "NCCL"),
            ("POST", "/collective_rpc", {"method": "update_weights_from_path"}, "not an admin route"),
            ("POST", "/v1/load_lora_adapters", {"lora_path": str(evil)}, "not an admin route"),
            ("GET", "/update_weights", None, "takes POST, not GET"),
            ("DELETE", "/v1/models", None, "takes GET or HEAD, not DELETE"),
            ("POST", "/update_weights", {}, "without 'weight_dir' is refused"),
            ("POST", "/update_weights", {"weight_dir": None}, "without 'weight_dir' is refused"),
            (
                "POST",
                "/load_lora_adapter",
                {"lora_name": "a", "lora_path": str(evil), "base_model": "x"},
                "'base_model'",
            ),
        ]
        for method, path, body, message in refused:
            status, reply = raw(client.url, method, path, body)
            assert status == 403 and message in reply, (path, status, reply)
            assert f"{method} {path}" in reply or "POST /" in reply, reply  # the route is named
        status, reply = raw(client.url, "POST", "/v1/load_lora_adapter", {"lora_name": "a", "lora_path": "/x/adapter"})
        assert status == 400 and "not a PRIME-RL weight dir" in reply, reply
        assert vllm.calls[before:] == []  # none of it reached vLLM
        # The orchestrator's own calls still pass, query included.
        assert raw(client.url, "POST", "/pause?mode=keep&clear_cache=false")[0] == 200
        assert vllm.calls[-1].path == "/pause?mode=keep&clear_cache=false"
        assert raw(client.url, "GET", "/v1/models/")[0] == 200 and vllm.calls[-1].path == "/v1/models"
        assert raw(client.url, "POST", "/resume")[0] == 200


def test_the_admin_proxy_speaks_tls_when_given_a_certificate(site, tmp_path):
    steps, public, tap, vllm = site
    pki = tls_files(tmp_path / "tls")
    with Client(
        tmp_path, tap.url, vllm.url, public, admin_tls_cert_file=pki.cert, admin_tls_key_file=pki.key
    ) as client:
        import ssl
        import urllib.request

        assert client.url.startswith("https://")
        context = ssl.create_default_context(cafile=str(pki.ca))
        request = urllib.request.Request(
            client.url + "/update_weights",
            method="POST",
            data=json.dumps({"weight_dir": str(steps[1])}).encode(),
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        )
        with urllib.request.urlopen(request, timeout=60, context=context) as response:
            assert response.status == 200
        assert vllm.updates()[-1].files == dir_digests(steps[1])
        with pytest.raises((OSError, http_client.HTTPException)):  # plain HTTP to the TLS port: no answer
            http("POST", client.url.replace("https://", "http://") + "/pause", timeout=5)


def test_an_oversize_or_compressed_answer_costs_that_server_its_turn_not_the_clients_memory(site, tmp_path):
    """A relay that sends a body shard 64 MB past its signed size, or a gzip-encoded manifest (a small body that
    inflates), is refused as it reads, within the size the file may have, and the client goes on to the next server."""
    import gzip

    steps, public, tap, vllm = site
    honest = tap.upstream
    listed = tap_listing(tap)[2]
    manifest_path = f"v2/{protocol.shard_name(listed.num_shards)}"
    delta_path = f"v2/{protocol.shard_name(1)}"
    with Client(tmp_path / "alone", tap.url, vllm.url, public, retries=1) as client:
        assert client.update(steps[1])[0] == 200
        tap.rewrite = {manifest_path: gzip.compress}
        tap.encoding = {manifest_path: "gzip"}
        status, body = client.update(steps[2])
        assert status == 502 and "Content-Encoding 'gzip'" in body, body
        tap.rewrite, tap.encoding = {delta_path: lambda data: data + bytes(64 << 20)}, {}
        status, body = client.update(steps[2])
        assert status == 502 and "more than the" in body and "this file may have" in body, body
        assert not client.fetcher.step_dir(2).exists()
    # the same hostile relay listed first beside the honest origin: its answers are passed over for the origin's
    tap.rewrite = {delta_path: lambda data: data + bytes(64 << 20)}
    with Client(tmp_path / "both", f"{tap.url},{honest}", vllm.url, public) as client:
        assert client.update(steps[1])[0] == 200
        assert client.update(steps[2])[0] == 200
        assert vllm.updates()[-1].files == dir_digests(steps[2])  # bit for bit, from the honest origin


def test_a_bad_mirror_costs_its_turn_not_the_step(site, tmp_path):
    """A relay listed before the origin that serves a forged manifest, a rewritten delta or a whole forged origin's
    versions: each answer that fails its signature or its signed blake3 passes the turn to the next server, the step
    is built from the honest one bit for bit, and nothing the mirror sent is applied."""
    steps, public, tap, vllm = site
    honest = tap.upstream
    listed = tap_listing(tap)[2]
    manifest_path, delta_path = f"v2/{protocol.shard_name(listed.num_shards)}", f"v2/{protocol.shard_name(1)}"

    def forge(manifest: dict) -> dict:
        manifest["digest"] = "0" * 64
        return manifest

    make_run(tmp_path / "forged-run", 2, lr=1e-4, seed=7, max_shard_bytes=200_000)
    forged = publish(tmp_path / "forged-run", tmp_path / "forged-pub", signing_keys(tmp_path / "forger")[0]).serve()
    for name, attack in (
        ("forged-manifest", lambda: tap.rewrite.update({manifest_path: lambda d: reframe(d, forge)})),
        ("rewritten-delta", lambda: tap.rewrite.update({delta_path: lambda d: bytes([d[0] ^ 1]) + d[1:]})),
        ("forged-origin", lambda: setattr(tap, "upstream", forged.url)),
    ):
        tap.rewrite, tap.upstream = {}, honest
        with Client(tmp_path / name, f"{tap.url},{honest}", vllm.url, public) as client:
            assert client.update(steps[1])[0] == 200
            attack()
            tap.served.clear()
            assert client.update(steps[2]) == (200, json.dumps({"status": "ok"})), name
            assert vllm.updates()[-1].files == dir_digests(steps[2]), name  # bit for bit, from the origin
            assert tap.count(manifest_path) == 1, name  # a refused manifest is not asked of that mirror again
    # With no honest server left, nothing unsigned is applied: the forgery is refused and vLLM keeps its weights.
    tap.rewrite, tap.upstream = {manifest_path: lambda d: reframe(d, forge)}, honest
    with Client(tmp_path / "alone", tap.url, vllm.url, public) as client:
        assert client.update(steps[1])[0] == 200
        status, body = client.update(steps[2])
        assert status == 502 and "does not verify" in body, body
        assert vllm.updates()[-1].files == dir_digests(steps[1]) and not client.fetcher.step_dir(2).exists()
    forged.stop()


def test_a_version_signed_for_another_run_is_refused(site, tmp_path):
    """One signing key, two runs: the other run's versions carry its run_id under the signature, so they cannot be
    served as this run's, even though they verify against the same key."""
    steps, public, tap, vllm = site
    make_run(tmp_path / "other-run", 2, lr=1e-4, seed=5, max_shard_bytes=200_000)
    other = publish(
        tmp_path / "other-run", tmp_path / "other-pub", signing_keys(tmp_path / "keys")[0], run_id="other-run"
    ).serve()
    with Client(tmp_path, tap.url, vllm.url, public) as client:
        assert client.update(steps[1])[0] == 200
        honest, tap.upstream = tap.upstream, other.url
        tap.served.clear()
        status, body = client.update(steps[2])
        assert status == 502 and "signed for run_id 'other-run', not this client's run_id = 'test-run'" in body, body
        assert body_shards_fetched(tap, tmp_path / "other-pub") == []
        assert vllm.updates()[-1].files == dir_digests(steps[1])
        tap.upstream = honest
        assert client.update(steps[2])[0] == 200
        assert vllm.updates()[-1].files == dir_digests(steps[2])
    other.stop()


def test_health_without_the_token_tells_readiness_and_nothing_of_the_upstream(site, tmp_path):
    steps, public, tap, vllm = site
    down = f"http://127.0.0.1:{free_port()}"
    with (
        Client(tmp_path / "up", tap.url, vllm.url, public) as up,
        Client(tmp_path / "down", tap.url, down, public) as client,
    ):
        assert http("GET", up.url + "/health", token=None) == (200, b'{"status": "ok"}')
        status, body = http("GET", client.url + "/health", token=None)
        assert status == 503 and body == b'{"error": "the inference server is not ready"}', body
        assert down.split(":")[-1].encode() not in body and b"127.0.0.1" not in body
        # The orchestrator, holding the token, gets the whole answer: which upstream, and why.
        status, body = http("GET", client.url + "/health", token=ADMIN_TOKEN)
        assert status == 502 and down.encode() in body, body


@pytest.mark.parametrize("keep_keyframes, kept", [(1, []), (2, [0])], ids=["pruned", "still-listed"])
def test_a_resumed_trainer_s_older_step_is_served_and_its_old_publication_is_not(tmp_path, keep_keyframes, kept):
    """PRIME-RL resumed from a checkpoint re-broadcasts its start step (`broadcasts/step_K` written again) and the
    orchestrator asks for it at once. The origin publishes it again with a newer sequence, whether v_K was pruned or
    is still listed (its old publication then older than what the client served), and leaves the old run's later
    steps alone until the trainer writes them again; the client waits for the new publication instead of refusing
    step K as older than what it served. The old publications stay refused."""
    run, keys = tmp_path / "run", signing_keys(tmp_path / "keys")
    steps = make_run(run, 4, max_shard_bytes=200_000)
    config = dict(
        output_dir=run,
        data_dir=tmp_path / "pub",
        signing_key_file=keys[0],
        host="127.0.0.1",
        port=0,
        keyframe_interval=3,
        keep_keyframes=keep_keyframes,
        shard_size=16384,
        run_id=RUN_ID,
    )
    origin = Origin(OriginConfig(**config))
    for step in origin.pending():
        origin.publish(step)
    assert sorted(origin.listing) == [*kept, *([1, 2] if kept else []), 3, 4]
    shutil.copytree(tmp_path / "pub", tmp_path / "recorded")  # the old run's publications, as an attacker keeps them
    served = serve_in_thread(static_app(tmp_path / "pub"), "127.0.0.1", 0, "origin")
    stop = threading.Event()

    def origin_loop() -> None:
        while not stop.wait(0.05):
            for step in origin.pending():
                origin.publish(step)

    publisher = threading.Thread(target=origin_loop, daemon=True)
    with Tap(served.url) as tap, AdminStandIn() as vllm:
        try:
            with Client(tmp_path, tap.url, vllm.url, keys[1], wait_for_version_s=60) as client:
                assert client.update(steps[4])[0] == 200
                # The trainer resumes from its step-1 checkpoint: the same weights, broadcast again (a newer STABLE).
                old = {step: (steps[step] / "STABLE").stat().st_mtime_ns for step in range(5)}
                (steps[1] / "STABLE").touch()
                reply: list[tuple[int, str]] = []
                asking = threading.Thread(target=lambda: reply.append(client.update(steps[1])), daemon=True)
                asking.start()  # the orchestrator asks before the origin has seen the re-broadcast
                time.sleep(0.5)
                publisher.start()
                asking.join(90)
                assert reply and reply[0][0] == 200, reply
                assert vllm.updates()[-1].files == dir_digests(steps[1])
                assert sorted(origin.listing) == [*kept, 1]  # step_2..step_4 are the old run's: not published again
                assert all((steps[s] / "STABLE").stat().st_mtime_ns == old[s] for s in (2, 3, 4))
                # The resumed trainer writes step 2 with weights of its own: published and served bit for bit.
                trainer = RLTrainer(ModelShape(), 1e-5, seed=9)
                trainer.step()
                write_broadcast_step(trainer.bf16_state_dict(), run / "broadcasts", 2, 200_000)
                assert client.update(steps[2])[0] == 200
                assert vllm.updates()[-1].files == dir_digests(steps[2]) and sorted(origin.listing) == [*kept, 1, 2]
        finally:
            stop.set()
            if publisher.is_alive():
                publisher.join(30)
        # The old run's publication of v4, replayed at a restarted client (it remembers what it served): refused.
        recorded = serve_in_thread(static_app(tmp_path / "recorded"), "127.0.0.1", 0, "recorded")
        tap.upstream = recorded.url
        tap.served.clear()
        with Client(tmp_path, tap.url, vllm.url, keys[1], wait_for_version_s=1) as client:
            status, body = client.update(run / "broadcasts" / "step_4")
            assert status == 502 and "a replayed publication" in body, body
        assert body_shards_fetched(tap, tmp_path / "recorded") == []
        assert vllm.updates()[-1].files == dir_digests(steps[2])
        recorded.stop()
    served.stop()
