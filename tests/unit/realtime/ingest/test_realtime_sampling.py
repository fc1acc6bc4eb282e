"""Sampling settings in the session log (docs/realtime.md, "On-policy discipline"): every session says how it was
sampled, and one sampled otherwise than the trainer assumes is refused with the field, the value and the fix."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from composer_prime.realtime.cycle.config import RealtimeConfig
from composer_prime.realtime.ingest.spool import Cursor, SpoolConfig
from composer_prime.realtime.records import MalformedRecord, parse_record
from tests.support.spool import read_spool
from tests.unit.realtime.ingest.test_realtime_ingest import NOW, append, session, signal


def test_a_session_without_its_sampling_settings_is_malformed():
    record = session("a")
    del record["sampling"]
    with pytest.raises(MalformedRecord, match="^session.sampling: Field required"):
        parse_record(json.dumps(record))


@pytest.mark.parametrize(
    ("sampling", "named"),
    [
        ({"temperature": 0.7}, "temperature = 0.7 (the trainer assumes 1.0)"),
        ({"temperature": 1.0, "top_p": 0.95}, "top_p = 0.95 (the trainer assumes 1.0)"),
        ({"temperature": 1.0, "top_k": 20}, "top_k = 20 (the trainer assumes 0)"),
    ],
)
def test_a_session_sampled_otherwise_than_the_trainer_assumes_is_refused(tmp_path, sampling, named):
    append(tmp_path / "a.jsonl", session("odd", sampling=sampling), signal("odd"), session("ok"), signal("ok"))
    step = read_spool(Cursor(), SpoolConfig(dir=tmp_path), NOW)
    assert [r.session.session_id for r in step.ready] == ["ok"] and step.counts["sampling_mismatch"] == 1
    assert named in step.rejected[0]["detail"] and "spool.sampling" in step.rejected[0]["detail"]


def test_the_expected_sampling_follows_the_trainer(tmp_path):
    append(tmp_path / "a.jsonl", session("warm", sampling={"temperature": 0.6}), signal("warm"))
    step = read_spool(Cursor(), SpoolConfig(dir=tmp_path, sampling={"temperature": 0.6}), NOW)
    assert [r.session.session_id for r in step.ready] == ["warm"]
    with pytest.raises(ValidationError, match="single-process trainer scores at temperature 1.0"):
        RealtimeConfig(model_dir=tmp_path, spool={"sampling": {"temperature": 0.6}})
    with pytest.raises(ValidationError, match="only untruncated sessions train"):
        RealtimeConfig(model_dir=tmp_path, spool={"sampling": {"temperature": 1.0, "top_p": 0.9}})
    source = {"env": {"taskset": {"id": "realtime-sessions"}}, "sampling": {"temperature": 0.6}}
    rl = {"orchestrator": {"train": {"source": [source]}}}
    with pytest.raises(ValidationError, match="PRIME-RL's realtime source trains at sampling.temperature = 0.6"):
        RealtimeConfig(model_dir=tmp_path, prime_rl={"rl": rl})
    RealtimeConfig(model_dir=tmp_path, prime_rl={"rl": rl}, spool={"sampling": {"temperature": 0.6}})
