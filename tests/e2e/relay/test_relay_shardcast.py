"""A stock SHARDCAST relay (`shardcast` 0.3.2's `MiddleNode`) between our origin and our client."""

from __future__ import annotations

import shutil

import pytest

from composer_prime.relay.client import ClientConfig, Fetcher
from composer_prime.relay.origin import Origin, OriginConfig
from tests.support.relay_pki import RUN_ID, signing_keys
from tests.support.relay_procs import free_port, http, wait_until
from tests.support.rl_checkpoints import make_run
from tests.support.vllm_admin import dir_digests

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("wget") is None, reason="shardcast's downloader shells out to wget"),
]


@pytest.fixture
def loopback_shardcast(monkeypatch):
    """shardcast binds 0.0.0.0 with no option to change it; tests listen on 127.0.0.1 only."""
    import shardcast.server

    bind = shardcast.server.ShardcastServer.__init__

    def loopback(self, address, directory, shutdown_event=None):
        bind(self, ("127.0.0.1", address[1]), directory, shutdown_event)

    monkeypatch.setattr(shardcast.server.ShardcastServer, "__init__", loopback)
    monkeypatch.setattr(shardcast.server, "get_local_ip", lambda: "127.0.0.1")


def test_shardcast_middle_node_relays_our_versions(tmp_path, loopback_shardcast):
    from shardcast.middle_node import MiddleNode

    steps = make_run(tmp_path / "run", 3, max_shard_bytes=200_000)
    private, public = signing_keys(tmp_path / "keys")
    origin = Origin(
        OriginConfig(
            output_dir=tmp_path / "run",
            data_dir=tmp_path / "pub",
            host="127.0.0.1",
            port=0,
            keyframe_interval=2,
            shard_size=16384,
            signing_key_file=private,
            run_id=RUN_ID,
        )
    )
    for step in origin.pending():
        origin.publish(step)
    server = origin.serve()
    port = free_port()
    middle = MiddleNode([server.url], str(tmp_path / "middle"), port, 1)
    try:
        wait_until(lambda: (tmp_path / "middle" / "v3").is_dir(), 30, "the relay to mirror v3")
        # The relay lists a version before it has all its shards: the client's bounded retries ride that out.
        # The relay is not trusted: the client checks the origin's signature on what it relays.
        config = ClientConfig(
            servers=[f"http://127.0.0.1:{port}"], store_dir=tmp_path / "store", verify_key_file=public, run_id=RUN_ID
        )
        fetcher = Fetcher(config)
        built = fetcher.ensure_step(3)
        assert dir_digests(built) == dir_digests(steps[3])
    finally:
        middle.shutdown()
        http("GET", f"http://127.0.0.1:{port}/distribution.txt", timeout=5)  # unblocks its handle_request loop
        server.stop()
