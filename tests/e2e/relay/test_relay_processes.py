"""Origin and client as real processes on 127.0.0.1, fed by real AdamW steps in PRIME-RL's broadcast layout."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.relay_pki import ADMIN_TOKEN, tls_files
from tests.support.relay_procs import REPO, Tap, http, start_client, start_origin, wait_until
from tests.support.rl_checkpoints import ModelShape, RLTrainer, write_broadcast_step
from tests.support.vllm_admin import AdminStandIn, dir_digests

pytestmark = pytest.mark.slow

SHAPE = ModelShape()  # ~120k parameters: 240 KB of bf16 per step
SHARD = 200_000  # trainer-side safetensors shard limit: two shards + index, like a multi-rank save


class Trainer:
    """Writes broadcasts/step_N the way PRIME-RL's filesystem broadcast does, one real RL step at a time."""

    def __init__(self, output_dir: Path, lr: float = 3e-6):
        self.rl = RLTrainer(SHAPE, lr)
        self.broadcasts = output_dir / "broadcasts"
        self.step = -1

    def next(self) -> Path:
        if self.step >= 0:
            self.rl.step()
        self.step += 1
        return write_broadcast_step(self.rl.bf16_state_dict(), self.broadcasts, self.step, SHARD)


def update_weights(proxy: str, step_dir: Path) -> tuple[int, dict]:
    """What PRIME-RL's orchestrator does for each new step: pause, touch NCCL_READY, update_weights, resume."""
    assert http("POST", f"{proxy}/pause?mode=keep&clear_cache=false")[0] == 200
    (step_dir / "NCCL_READY").touch()
    status, body = http("POST", f"{proxy}/update_weights", {"weight_dir": step_dir.as_posix()}, timeout=120)
    assert http("POST", f"{proxy}/resume")[0] == 200
    return status, json.loads(body or b"null")


def test_each_step_reaches_the_inference_host_bit_exact(tmp_path):
    trainer = Trainer(tmp_path / "run")
    trainer.next()
    origin, origin_url = start_origin(
        tmp_path / "run",
        tmp_path / "origin",
        tmp_path / "origin.log",
        keyframe_interval=3,
        keep_keyframes=1,
        shard_size=16384,
    )
    with origin, AdminStandIn() as vllm:
        client, proxy = start_client(origin_url, vllm.url, tmp_path / "store", tmp_path / "client.log")
        with client:
            for _ in range(5):  # steps 0..5: keyframes at v0 and v3
                step_dir = trainer.broadcasts / f"step_{trainer.step}"
                # The orchestrator fires as soon as STABLE exists, before the origin has published: the proxy waits.
                status, body = update_weights(proxy, step_dir)
                assert status == 200, body
                call = vllm.updates()[-1]
                local = Path(call.body["weight_dir"])
                assert local == tmp_path / "store" / "steps" / f"step_{trainer.step}"
                assert call.files == dir_digests(step_dir), f"step {trainer.step} differs from the trainer's"
                trainer.next()

            assert [c.path for c in vllm.calls if c.method == "POST"][:3] == [
                "/pause?mode=keep&clear_cache=false",
                "/update_weights",
                "/resume",
            ]
            assert (
                http("GET", f"{proxy}/v1/models")[1]
                == json.dumps({"object": "list", "data": [{"id": "tiny-lm", "object": "model"}]}).encode()
            )
            # Bounded disk: two built steps, no leftover downloads.
            store = tmp_path / "store"
            assert len(list((store / "steps").glob("step_*"))) <= 2
            assert not any((store / "downloads").rglob("*.bin"))

        # Deltas are far smaller than the checkpoint; keyframes carry both a delta and a full section.
        ckpt_bytes = sum(
            (trainer.broadcasts / "step_1" / f).stat().st_size for f in dir_digests(trainer.broadcasts / "step_1")
        )
        wait_until(lambda: (tmp_path / "origin" / "v5").is_dir(), 30, "v5 published")
        v4_bytes = sum(p.stat().st_size for p in (tmp_path / "origin" / "v4").iterdir())
        assert v4_bytes < ckpt_bytes / 5
        # Retention with keep_keyframes=1: the latest keyframe (v3) onward.
        listed = (tmp_path / "origin" / "distribution.txt").read_text().split()
        assert [line for line in listed if line.endswith(":")] == ["v3:", "v4:", "v5:"]
        assert not (tmp_path / "origin" / "v0").exists()


def damage_a_weight(step_dir: Path) -> None:
    """Flip one bit of a weight byte (not the header: only a digest can notice) in a built step's first file."""
    victim = step_dir / "model-00001-of-00002.safetensors"
    data = bytearray(victim.read_bytes())
    data[-3] ^= 0x40
    victim.write_bytes(bytes(data))


def _publish(tmp_path: Path, steps: int, **origin_options) -> tuple[Trainer, object, str]:
    trainer = Trainer(tmp_path / "run")
    for _ in range(steps + 1):
        trainer.next()
    origin, url = start_origin(tmp_path / "run", tmp_path / "origin", tmp_path / "origin.log", **origin_options)
    wait_until(lambda: f"v{steps}:" in http("GET", f"{url}/distribution.txt")[1].decode(), 60, f"v{steps} listed")
    return trainer, origin, url


def test_a_resume_asking_for_the_checkpoints_weight_dir_gets_that_step(tmp_path):
    """On resume PRIME-RL's orchestrator asks for `<output_dir>/checkpoints/step_N/weight` when the checkpoint holds
    weights (`get_weight_dir`); the trainer broadcasts step N again at its start, so the proxy serves step N."""
    trainer, origin, url = _publish(tmp_path, 2, shard_size=16384)
    with origin, AdminStandIn() as vllm:
        client, proxy = start_client(url, vllm.url, tmp_path / "store", tmp_path / "client.log")
        with client:
            weight = tmp_path / "run" / "checkpoints" / "step_2" / "weight"
            weight.mkdir(parents=True)
            status, body = update_weights(proxy, weight)
            assert status == 200, body
            assert vllm.updates()[-1].files == dir_digests(trainer.broadcasts / "step_2")
            status, body = http("POST", f"{proxy}/update_weights", {"weight_dir": str(tmp_path / "run" / "weight")})
            assert status == 400 and b"checkpoints/step_<N>/weight" in body


def test_late_client_catches_up_from_the_latest_keyframe(tmp_path):
    trainer, origin, url = _publish(tmp_path, 5, keyframe_interval=3, shard_size=16384)
    with origin, Tap(url) as tap, AdminStandIn() as vllm:
        client, proxy = start_client(tap.url, vllm.url, tmp_path / "store", tmp_path / "client.log", "--no-prefetch")
        with client:
            status, body = update_weights(proxy, trainer.broadcasts / "step_5")
            assert status == 200, body
            assert vllm.updates()[-1].files == dir_digests(trainer.broadcasts / "step_5")
            # Only the manifests of v5, v4, v3 and their needed sections: nothing before the keyframe.
            assert not any(tap.shards_served(v) for v in (0, 1, 2))
            assert tap.shards_served(3) and tap.shards_served(4) and tap.shards_served(5)
            assert "built step_3 from full v3" in client.log()
            assert "built step_5 from delta v5" in client.log()


def test_client_killed_mid_download_resumes_and_refetches_damage(tmp_path):
    trainer, origin, url = _publish(tmp_path, 1, keyframe_interval=10, shard_size=8192)
    with origin, Tap(url) as tap, AdminStandIn() as vllm:
        tap.shard_delay_s = 0.15
        downloads = tmp_path / "store" / "downloads" / "v0"
        tap.damage = {"v0/shard_00002.bin": ["flip"], "v0/shard_00003.bin": ["truncate"]}
        client, proxy = start_client(tap.url, vllm.url, tmp_path / "store", tmp_path / "client.log", concurrency=1)
        with client:  # prefetch starts downloading v1 (keyframe v0 first) on its own
            wait_until(lambda: len(list(downloads.glob("shard_*.bin"))) >= 4, 60, "four verified shards on disk")
            client.kill()
        before = sorted(p.name for p in downloads.glob("shard_*.bin"))
        assert 4 <= len(before) < len(list((tmp_path / "origin" / "v0").iterdir()))
        assert tap.count("v0/shard_00002.bin") == 2 and tap.count("v0/shard_00003.bin") == 2  # damaged once, refetched
        # Damage one verified shard on disk while the client is down: it must be re-checked, not trusted.
        victim = downloads / before[0]
        victim.write_bytes(b"\x00" + victim.read_bytes()[1:])

        tap.shard_delay_s = 0.0
        client, proxy = start_client(tap.url, vllm.url, tmp_path / "store", tmp_path / "client2.log", "--no-prefetch")
        with client:
            status, body = update_weights(proxy, trainer.broadcasts / "step_1")
            assert status == 200, body
            assert vllm.updates()[-1].files == dir_digests(trainer.broadcasts / "step_1")
            assert "is damaged; fetching it again" in client.log()
        for name in before[1:]:
            assert tap.count(f"v0/{name}") == (2 if name in ("shard_00002.bin", "shard_00003.bin") else 1), name
        assert tap.count(f"v0/{before[0]}") >= 2


def test_missing_keyframe_fails_loudly_then_recovers(tmp_path):
    trainer, origin, url = _publish(tmp_path, 2, keyframe_interval=10, shard_size=16384)
    with origin, Tap(url) as tap, AdminStandIn() as vllm:
        tap.hidden_versions = {0}  # a relay that lost the keyframe
        client, proxy = start_client(
            tap.url, vllm.url, tmp_path / "store", tmp_path / "client.log", "--no-prefetch", wait_for_version_s=2
        )
        with client:
            status, body = http("POST", f"{proxy}/update_weights", {"weight_dir": str(trainer.broadcasts / "step_2")})
            assert status == 502
            assert "v0 is needed" in body.decode() and "keyframe" in body.decode()
            assert vllm.updates() == []  # nothing half-built reached vLLM
            assert not list((tmp_path / "store" / "steps").glob("step_2"))
            # Skipped while v2 is listed: waited for (a resumed trainer writes an older step again), then a 504.
            tap.hidden_versions = {1}
            status, body = http("POST", f"{proxy}/update_weights", {"weight_dir": str(trainer.broadcasts / "step_1")})
            assert status == 504 and "a step behind the newest appears only when the trainer" in body.decode(), body
            tap.hidden_versions = set()
            status, body = update_weights(proxy, trainer.broadcasts / "step_2")
            assert status == 200, body
            assert vllm.updates()[-1].files == dir_digests(trainer.broadcasts / "step_2")


def _raw(url: str, data: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(data)  # the server answers a bad request and closes the connection
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_garbage_http_gets_clean_4xx(tmp_path):
    trainer, origin, url = _publish(tmp_path, 0, shard_size=16384)
    with origin, AdminStandIn() as vllm:
        client, proxy = start_client(url, vllm.url, tmp_path / "store", tmp_path / "client.log", "--no-prefetch")
        with client:
            update = f"{proxy}/update_weights"
            cases = [
                (b"not json", 400, "not JSON"),
                (b"[1, 2]", 400, "JSON object"),
                (json.dumps({"weight_dir": 5}).encode(), 400, "'weight_dir'"),
                (json.dumps({"weight_dir": "/etc/passwd"}).encode(), 400, "not a PRIME-RL weight dir"),
                (b"x" * ((2 << 20) + 7), 413, "max_body_bytes"),
            ]
            for body, status, message in cases:
                got, reply = http("POST", update, body)
                assert got == status and message in json.loads(reply)["error"], (body[:40], got, reply)
            assert _raw(proxy, b"\x16\x03\x01 garbage\r\n\r\n").split(b" ")[1] == b"400"
            bad_length = b"POST /update_weights HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n"
            assert _raw(proxy, bad_length).split(b" ")[1] == b"400"
            # A chunked body is read like any other: here it is empty, so not JSON.
            chunked = (
                b"POST /update_weights HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                + f"Authorization: Bearer {ADMIN_TOKEN}\r\n\r\n0\r\n\r\n".encode()
            )
            answer = _raw(proxy, chunked + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert answer.split(b" ")[1] == b"400" and b"JSON object" in answer
            assert vllm.updates() == []
            # The origin serves only the protocol's files.
            assert http("GET", f"{url}/.base/.base.json")[0] == 404
            assert http("GET", f"{url}/")[0] == 404  # no directory listings
            assert http("POST", f"{url}/distribution.txt", b"{}")[0] == 405
            assert _raw(url, b"\x00\x01garbage\r\n\r\n").split(b" ")[1] == b"400"
            # Both still work afterwards.
            assert update_weights(proxy, trainer.broadcasts / "step_0")[0] == 200
            assert vllm.updates()[-1].files == dir_digests(trainer.broadcasts / "step_0")


def test_damaged_base_on_the_client_is_caught_and_replaced(tmp_path):
    trainer, origin, url = _publish(tmp_path, 2, keyframe_interval=10, shard_size=16384)
    with origin, AdminStandIn() as vllm:
        client, proxy = start_client(url, vllm.url, tmp_path / "store", tmp_path / "client.log", "--no-prefetch")
        with client:
            assert update_weights(proxy, trainer.broadcasts / "step_1")[0] == 200
            damage_a_weight(tmp_path / "store" / "steps" / "step_1")

            status, body = http("POST", f"{proxy}/update_weights", {"weight_dir": str(trainer.broadcasts / "step_2")})
            assert status == 502 and "does not match its published digest" in body.decode(), body
            assert len(vllm.updates()) == 1  # only step 1 ever reached vLLM
            assert not (tmp_path / "store" / "steps" / "step_1").exists()

            status, body = update_weights(proxy, trainer.broadcasts / "step_2")  # PRIME-RL's retry
            assert status == 200, body
            assert vllm.updates()[-1].files == dir_digests(trainer.broadcasts / "step_2")


def test_cli_names_the_bad_option(tmp_path):
    cases = [
        (
            ["origin", "--output-dir", str(tmp_path), "--data-dir", str(tmp_path / "d"), "--keyframe-interval", "0"],
            "--keyframe-interval\n  Input should be greater than or equal to 1",
        ),
        (
            ["client", "--servers", "trainer:8000", "--upstream", "http://127.0.0.1:1", "--store-dir", str(tmp_path)],
            "write it as http://host:port",
        ),
    ]
    for args, message in cases:
        done = subprocess.run(
            [sys.executable, "-m", "composer_prime", "relay", *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        assert done.returncode == 2 and message in done.stderr, done.stderr


def test_keygen_and_the_key_and_token_options_name_the_fix(tmp_path):
    def relay(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "composer_prime", "relay", *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            env={**os.environ, "RELAY_TOKEN": ADMIN_TOKEN},
        )

    keys = ["--private-key-file", str(tmp_path / "k"), "--public-key-file", str(tmp_path / "k.pub")]
    done = relay("keygen", *keys)
    assert done.returncode == 0 and "signing_key_file" in done.stdout, done.stderr
    assert (tmp_path / "k").stat().st_mode & 0o777 == 0o600
    assert b"BEGIN PUBLIC KEY" in (tmp_path / "k.pub").read_bytes()
    done = relay("keygen", *keys)
    assert done.returncode == 2 and "never replaces a key" in done.stderr
    (tmp_path / "not-a-key").write_text("hello")
    (tmp_path / "not-a-key").chmod(0o600)
    shared = tmp_path / "shared.key"  # the private key, readable by the owner's group: refused, as ssh does
    shared.write_bytes((tmp_path / "k").read_bytes())
    shared.chmod(0o640)
    token = tmp_path / "token"
    token.write_text(ADMIN_TOKEN)
    token.chmod(0o604)
    pki = tls_files(tmp_path / "tls")
    shared_tls = tmp_path / "shared-tls.key"
    shared_tls.write_bytes(pki.key.read_bytes())
    shared_tls.chmod(0o640)
    origin = ["origin", "--output-dir", str(tmp_path), "--data-dir", str(tmp_path / "d"), "--run-id", "r"]
    signed = origin + ["--signing-key-file", str(tmp_path / "k")]
    client = [
        "client",
        "--servers",
        "http://127.0.0.1:1",
        "--upstream",
        "http://127.0.0.1:2",
        "--store-dir",
        str(tmp_path / "s"),
        "--run-id",
        "r",
        "--verify-key-file",
        str(tmp_path / "k.pub"),
    ]
    tls_client = [*client[:2], "https://127.0.0.1:1", *client[3:], "--admin-token-env", "RELAY_TOKEN"]
    for args, message in [
        (origin, "--signing-key-file\n  Field required"),
        (origin + ["--signing-key-file", str(tmp_path / "not-a-key")], "is not an unencrypted PEM private key"),
        (origin + ["--signing-key-file", str(tmp_path / "k.pub")], "is not an unencrypted PEM private key"),
        (origin[:-2] + ["--signing-key-file", str(tmp_path / "k")], "--run-id\n  Field required"),
        (
            origin + ["--signing-key-file", str(shared)],
            f"signing_key_file = '{shared}' has mode 0640: group or others can read it, and it is a secret. Make it "
            f"readable by its owner only: chmod 600 '{shared}'",
        ),
        (
            signed + ["--tls-cert-file", str(pki.cert), "--tls-key-file", str(tmp_path / "k")],
            f"tls_cert_file = '{pki.cert}' with tls_key_file = '{tmp_path / 'k'}' does not load",
        ),
        (
            signed + ["--tls-cert-file", str(pki.cert), "--tls-key-file", str(tmp_path / "missing")],
            f"tls_key_file = '{tmp_path / 'missing'}' cannot be read (No such file or directory)",
        ),
        (
            signed
            + [
                "--tls-cert-file",
                str(pki.cert),
                "--tls-key-file",
                str(pki.key),
                "--tls-client-ca-file",
                str(tmp_path / "not-a-key"),
            ],
            f"tls_client_ca_file = '{tmp_path / 'not-a-key'}' holds no PEM CA",
        ),
        (client, "admin_token_file = None and admin_token_env = None: set exactly one"),
        (client + ["--admin-token-file", str(token)], f"admin_token_file = '{token}' has mode 0604"),
        (client[:-1] + [str(tmp_path / "k"), "--admin-token-env", "RELAY_TOKEN"], "is not a PEM public key"),
        (
            client + ["--admin-token-env", "RELAY_TOKEN", "--tls-ca-file", str(tmp_path / "k.pub")],
            "tls_ca_file = '" + str(tmp_path / "k.pub") + "' is set but servers",
        ),
        (
            tls_client + ["--tls-ca-file", str(tmp_path / "k.pub")],
            f"tls_ca_file = '{tmp_path / 'k.pub'}' holds no PEM CA certificate",
        ),
        (
            tls_client + ["--tls-cert-file", str(pki.client_cert), "--tls-key-file", str(pki.key)],
            f"tls_cert_file = '{pki.client_cert}' with tls_key_file = '{pki.key}' does not load",
        ),
        (
            client
            + [
                "--admin-token-env",
                "RELAY_TOKEN",
                "--admin-tls-cert-file",
                str(pki.cert),
                "--admin-tls-key-file",
                str(shared_tls),
            ],
            f"admin_tls_key_file = '{shared_tls}' has mode 0640",
        ),
        (
            client
            + [
                "--admin-token-env",
                "RELAY_TOKEN",
                "--admin-tls-cert-file",
                str(tmp_path / "k.pub"),
                "--admin-tls-key-file",
                str(pki.key),
            ],
            f"admin_tls_cert_file = '{tmp_path / 'k.pub'}' with ",
        ),
        (client[:-4] + ["--run-id", "two words", *client[-2:]], "--run-id\n  String should match pattern"),
    ]:
        done = relay(*args)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
        assert len(done.stderr.splitlines()) < 25, done.stderr  # one screen


def test_trainer_restart_rewrites_steps_and_clients_follow(tmp_path):
    trainer, origin, url = _publish(tmp_path, 2, keyframe_interval=10, shard_size=16384)
    with origin, AdminStandIn() as vllm:
        client, proxy = start_client(url, vllm.url, tmp_path / "store", tmp_path / "client.log", "--no-prefetch")
        with client:
            assert update_weights(proxy, trainer.broadcasts / "step_2")[0] == 200
            old_step_2 = vllm.updates()[-1].files
            # The trainer crashes and resumes from step 1 with other data: step_2 is written again, then step_3.
            resumed = Trainer(tmp_path / "run", lr=1e-5)
            for step in (2, 3):
                resumed.rl.step()
                write_broadcast_step(resumed.rl.bf16_state_dict(), resumed.broadcasts, step, SHARD)
            wait_until(lambda: "v3:" in http("GET", f"{url}/distribution.txt")[1].decode(), 60, "v3 listed")
            assert "re-broadcast" in origin.log()

            for step in (2, 3):
                status, body = update_weights(proxy, resumed.broadcasts / f"step_{step}")
                assert status == 200, body
                assert vllm.updates()[-1].files == dir_digests(resumed.broadcasts / f"step_{step}")
            assert vllm.updates()[-2].files != old_step_2  # the rewritten step_2, not the copy built before
            assert "from an earlier publication" in client.log()


def test_a_built_step_never_waits_behind_an_unpublished_one_and_callers_can_give_up(tmp_path):
    import threading
    import time

    trainer, origin, url = _publish(tmp_path, 1, keyframe_interval=10, shard_size=16384)
    with origin, AdminStandIn() as vllm:
        client, proxy = start_client(
            url, vllm.url, tmp_path / "store", tmp_path / "client.log", "--no-prefetch", wait_for_version_s=30
        )
        with client:
            assert update_weights(proxy, trainer.broadcasts / "step_1")[0] == 200

            # A request for step 7 (not published) waits; the caller gives up after 6 s and closes its connection.
            def give_up():
                try:
                    http("POST", f"{proxy}/update_weights", {"weight_dir": str(trainer.broadcasts / "step_7")}, 6.0)
                except OSError:
                    pass  # our own timeout: we gave up

            waiting = threading.Thread(target=give_up)
            waiting.start()
            time.sleep(0.5)
            start = time.monotonic()
            status, _ = http("POST", f"{proxy}/update_weights", {"weight_dir": str(trainer.broadcasts / "step_1")})
            assert status == 200 and time.monotonic() - start < 3.0  # not behind the wait for step 7
            waiting.join()
            wait_until(lambda: "the caller went away" in client.log(), 10, "the abandoned wait to stop")
            assert "Traceback" not in client.log() and "BrokenPipe" not in client.log()


def test_a_step_damaged_after_it_was_built_is_rebuilt_before_vllm_reads_it(tmp_path):
    trainer, origin, url = _publish(tmp_path, 1, keyframe_interval=10, shard_size=16384)
    with origin, AdminStandIn() as vllm:
        client, proxy = start_client(url, vllm.url, tmp_path / "store", tmp_path / "client.log", "--no-prefetch")
        with client:
            assert update_weights(proxy, trainer.broadcasts / "step_1")[0] == 200
            damage_a_weight(tmp_path / "store" / "steps" / "step_1")
            assert update_weights(proxy, trainer.broadcasts / "step_1")[0] == 200  # PRIME-RL asks again
            assert vllm.updates()[-1].files == dir_digests(trainer.broadcasts / "step_1")
            assert "no longer matches the files it was built with" in client.log()


def test_a_client_started_before_anything_is_published_stays_quiet(tmp_path):
    trainer = Trainer(tmp_path / "run")
    (tmp_path / "run").mkdir()  # the run has started (the origin refuses a missing output_dir) but published nothing
    origin, url = start_origin(tmp_path / "run", tmp_path / "origin", tmp_path / "origin.log")
    with origin, AdminStandIn() as vllm:
        client, proxy = start_client(url, vllm.url, tmp_path / "store", tmp_path / "client.log", poll_interval_s=0.1)
        with client:
            import time

            time.sleep(1.5)  # several prefetch polls against an empty origin
            assert "WARNING" not in client.log(), client.log()
            trainer.next()
            assert update_weights(proxy, trainer.broadcasts / "step_0")[0] == 200


def test_a_caller_that_hangs_up_after_the_status_line_is_not_an_upstream_failure(tmp_path):
    """A readiness probe closes once it has the status line; a body written after that fails on the caller's closed
    socket. The proxy takes that as the caller going away, never as "upstream unreachable" (a WARNING and a 502 that
    used to flake the quiet-client test above), and goes on serving."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class BigBody(BaseHTTPRequestHandler):
        def log_message(self, *args):  # type: ignore[no-untyped-def]
            pass

        def do_GET(self):  # type: ignore[no-untyped-def]
            self.send_response(200)
            self.send_header("Content-Length", str(1 << 22))
            self.end_headers()
            try:
                for _ in range(64):
                    self.wfile.write(b"x" * (1 << 16))
            except OSError:
                pass

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), BigBody)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    (tmp_path / "run").mkdir()
    origin, url = start_origin(tmp_path / "run", tmp_path / "origin", tmp_path / "origin.log")
    try:
        with origin:
            client, proxy = start_client(
                url, f"http://127.0.0.1:{upstream.server_address[1]}", tmp_path / "store", tmp_path / "client.log"
            )
            with client:
                port = int(proxy.rsplit(":", 1)[1])
                for _ in range(20):
                    with socket.create_connection(("127.0.0.1", port), timeout=10) as caller:
                        auth = f"Authorization: Bearer {ADMIN_TOKEN}\r\n".encode()
                        caller.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + b"\r\n")
                        assert caller.recv(64).startswith(b"HTTP/1.1 200")
                status, body = http("GET", proxy + "/v1/models")
                assert status == 200 and len(body) == 1 << 22
                assert "WARNING" not in client.log() and "unreachable" not in client.log(), client.log()[-3000:]
    finally:
        upstream.shutdown()
        upstream.server_close()


def test_an_idle_client_logs_state_changes_not_polls(tmp_path):
    """The proxy polls the listing every `poll_interval_s`: idle, its log stays still; an origin gone away is one
    warning, not one per poll."""
    import time

    trainer = Trainer(tmp_path / "run")
    trainer.next()
    origin, url = start_origin(tmp_path / "run", tmp_path / "origin", tmp_path / "origin.log")
    with origin, AdminStandIn() as vllm:
        client, _ = start_client(url, vllm.url, tmp_path / "store", tmp_path / "client.log", poll_interval_s=0.1)
        with client:
            wait_until(lambda: "built step_0" in client.log(), 30, "the prefetch of step_0")
            lines = len(client.log().splitlines())
            time.sleep(1.5)  # about 15 polls, nothing new on the relay
            assert client.log().splitlines()[lines:] == []
            origin.stop()
            time.sleep(1.5)  # about 15 polls of an origin that is gone
            new = client.log().splitlines()[lines:]
            assert len(new) == 1 and "WARNING prefetch:" in new[0] and "logged once" in new[0], new
