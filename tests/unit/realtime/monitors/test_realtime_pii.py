"""Secrets and personal data never train (docs/realtime.md, "Safety of the signal"): one test per kind the scan finds,
found in the decoded token stream alone, in `user`, `info` and `messages`; nothing ordinary code holds is taken for
one; rejected lines and pending sessions are not copied into the durable state."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from urllib.parse import quote

import pytest

from composer_prime.realtime.cycle.config import RealtimeConfig
from composer_prime.realtime.cycle.runner import State, read_batch
from composer_prime.realtime.ingest.join import build_episodes
from composer_prime.realtime.ingest.spool import Cursor, SpoolConfig
from composer_prime.realtime.ingest.staleness import StalenessConfig, Steps
from composer_prime.realtime.monitors.pii import PIIConfig, Scrubber, find, redact
from composer_prime.realtime.monitors.reward import RewardModelConfig
from composer_prime.realtime.monitors.secret_rules import RULES
from tests.support.secret_samples import SECRETS
from tests.support.spool import read_spool
from tests.support.tokenizer import encode, tiny_tokenizer

NOW = 1_800_000_000.0


ORDINARY = [
    "def f(a, b):\n    return a + b  # see commit 3f2c1e9a8b7d6c5e4f3a2b1c0d9e8f7a6b5c4d3e",
    "version = '2.31.0'; port = 5432; timeout_s = 3600; date = '2026-11-26'",
    "url = 'https://api.example.com/v1/items?page=2'; x = 1_000_000",
    "sk = 'sk-short'; token = os.environ['OPENAI_API_KEY']; assert 10 - 5 == 5",
    "self.assertEqual(compute(3, 4), 12)  # tests/test_math.py:123",
]


def test_the_first_kinds_are_still_rules():
    """Every rule has a sample in test_realtime_secrets.py; these are the first 22, tried in more settings here."""
    assert set(SECRETS) <= {r.name for r in RULES}


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_kind_is_found_and_redacted(kind):
    text = f"here it is: {SECRETS[kind]} thanks"
    assert kind in find(text)
    assert SECRETS[kind] not in redact(text) and f"[{kind}]" in redact(text)


ASSIGNED = [
    "{name}={secret}",
    'export {name}="{secret}"',
    "{name} = '{secret}'",
    "{name}: {secret}",
    '"{name}": "{secret}"',
    "--{name}={secret}",
]
"""How a `.env`, a shell, Python, YAML, JSON or a command line assigns a value."""


@pytest.mark.parametrize("form", ASSIGNED)
@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_kind_is_found_where_it_is_assigned(kind, form):
    assert kind in find(form.format(name=kind.upper(), secret=SECRETS[kind]))


def test_a_url_with_an_empty_user_still_holds_a_password():
    assert find("REDIS_URL=redis://:s3cr3tpass@cache:6379/0") == ["url_password"]


ENCODED = [
    lambda secret: json.dumps({"path": ".env", "content": "DEBUG=1\n" + secret}),  # a tool call's JSON arguments
    lambda secret: json.dumps({"content": "\t" + secret}),
    lambda secret: "data:\n  token: " + base64.b64encode(f"export TOKEN={secret}\n".encode()).decode(),  # k8s Secret
    lambda secret: "Authorization: Basic " + base64.urlsafe_b64encode(f"svc:{secret}".encode()).decode(),
    lambda secret: "https://example.com/cb?next=" + quote(f"token={secret}", safe=""),  # URL-encoded
]
"""Where a secret hides from a pattern read on the raw text: behind a string escape, in base64, URL-encoded."""


@pytest.mark.parametrize("encode_", range(len(ENCODED)))
@pytest.mark.parametrize("kind", ["github_token", "openai_key", "aws_secret_key", "aws_access_key", "email"])
def test_a_secret_is_found_behind_an_escape_in_base64_or_url_encoded(kind, encode_):
    assert kind in find(ENCODED[encode_](SECRETS[kind]))


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_code_is_not_taken_for_a_secret(text):
    assert find(text) == []


def session(sid: str, text: str = "", where: str = "tokens", **extra) -> dict:
    ended = NOW - 3600
    context = encode("<|im_start|>user\nplease fix the bug\n")
    sampled = encode(f"Sure, here is the fix. {text}" if where == "tokens" else "Sure, here is the fix.")
    record = {
        "schema": "composer-session",
        "version": 1,
        "kind": "session",
        "session_id": sid,
        "policy_version": 0,
        "sampling": {"temperature": 1.0},
        "started_at": ended - 60,
        "ended_at": ended,
        "user": "u-1",
        "branches": [
            {
                "segments": [
                    {"token_ids": context, "sampled": False},
                    {"token_ids": sampled, "sampled": True, "logprobs": [-0.5] * len(sampled)},
                ]
            }
        ],
        **extra,
    }
    if where == "user":
        record["user"] = text
    elif where == "info":
        record["info"] = {"repo": {"remote": text}}
    elif where == "messages":
        record["messages"] = [{"role": "user", "content": f"use {text}"}]
    return record


def signal(sid: str) -> dict:
    return {
        "schema": "composer-session",
        "version": 1,
        "kind": "signal",
        "session_id": sid,
        "at": NOW - 3000,
        "signal": {"type": "thumbs", "up": True},
    }


def ingest(tmp_path: Path, records: list) -> tuple[list, dict]:
    spool = tmp_path / "spool"
    spool.mkdir(exist_ok=True)
    with (spool / "a.jsonl").open("a") as f:
        f.writelines((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)
    step = read_spool(Cursor(), SpoolConfig(dir=spool), NOW)
    scrub = Scrubber(PIIConfig(tokenizer=tiny_tokenizer()))
    episodes, counts = build_episodes(step.ready, Steps(), RewardModelConfig(), StalenessConfig(), scrub)
    return episodes, dict(counts)


@pytest.fixture(scope="module")
def scrub() -> Scrubber:
    return Scrubber(PIIConfig(tokenizer=tiny_tokenizer()))


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_a_secret_only_in_the_token_stream_never_trains(kind, scrub, tmp_path):
    """The text a session trains on is its decoded token stream: a secret there alone drops the session."""
    episodes, counts = ingest(tmp_path, [session("leak", SECRETS[kind]), signal("leak"), session("ok"), signal("ok")])
    assert [e.session_id for e in episodes] == ["ok"] and counts["pii_dropped"] == 1


@pytest.mark.parametrize("where", ["user", "info", "messages"])
def test_a_secret_in_user_info_or_messages_drops_the_session(where, tmp_path):
    episodes, counts = ingest(tmp_path, [session("leak", SECRETS["ssn"], where), signal("leak")])
    assert episodes == [] and counts["pii_dropped"] == 1


def test_the_scan_needs_the_tokenizer_and_names_the_fix(tmp_path):
    with pytest.raises(ValueError, match="pii.tokenizer is unset"):
        Scrubber(PIIConfig())
    with pytest.raises(ValueError, match="pii.tokenizer = .*does not load"):
        Scrubber(PIIConfig(tokenizer=str(tmp_path / "none")))
    with pytest.raises(ValueError, match="pii.tokenizer is unset and there is no model_dir"):
        RealtimeConfig(
            prime_rl={
                "rl": {"orchestrator": {"train": {"source": [{"env": {"taskset": {"id": "realtime-sessions"}}}]}}}
            }
        )
    assert RealtimeConfig(model_dir=tmp_path).pii.tokenizer == str(tmp_path)


def test_rejected_lines_and_pending_sessions_are_not_copied_into_the_batch(tmp_path):
    secret = SECRETS["anthropic_key"]
    spool = tmp_path / "spool"
    spool.mkdir()
    pending = session("recent", secret, "messages") | {"ended_at": NOW - 10, "started_at": NOW - 60}
    broken = json.dumps(session("bad", secret, "messages") | {"policy_version": f"v {secret}"})
    (spool / "a.jsonl").write_text("\n".join([broken, f"not json {secret}", json.dumps(pending)]) + "\n")
    config = RealtimeConfig(
        state_dir=tmp_path / "state", model_dir=tmp_path, spool={"dir": spool}, pii={"tokenizer": tiny_tokenizer()}
    )
    batch = read_batch(config, State(), 1, lambda: NOW)
    assert batch.counts["malformed"] == 2 and list(batch.cursor.pending) == ["recent"]
    text = (tmp_path / "state" / "cycles" / "000001" / "batch.json").read_text()
    assert secret not in text and "please fix" not in text
    assert [r["length"] for r in batch.rejected] == [len(broken), len(f"not json {secret}")]
    assert "[anthropic_key]" in batch.rejected[0]["detail"]
    # The pending session is read again from the spool when its window closes.
    later = read_batch(config, State(cycle=1), 2, lambda: NOW + 3600)
    assert later.counts["pii_dropped"] == 1 and later.cursor.pending == {}
