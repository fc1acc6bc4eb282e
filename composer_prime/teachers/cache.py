"""The answer cache: a re-scored trace or a retried rollout never pays twice for the same question.

One file per answer, `<dir>/<key[:2]>/<key>.json`, key = sha256 of (teacher name, model, request messages). Files
are written with `composer_prime.atomic.write_atomic` (temp file, fsync, rename), so concurrent writers of the same
key each replace the file whole and a reader sees one complete answer or none. An unreadable file is a miss.
Only answers the teacher actually sent (HTTP 200) are stored, readable verdict or not.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from composer_prime.atomic import write_atomic

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    """A teacher's reply text and the tokens it was billed for."""

    text: str
    input_tokens: int
    output_tokens: int


def cache_key(teacher: str, model: str, messages: list[dict[str, str]]) -> str:
    blob = json.dumps([teacher, model, messages], ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class AnswerCache:
    def __init__(self, root: Path | None):
        self.root = root

    def _path(self, key: str) -> Path:
        assert self.root is not None
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> Answer | None:
        if self.root is None:
            return None
        try:
            raw = json.loads(self._path(key).read_text(encoding="utf-8"))
            return Answer(str(raw["text"]), int(raw["input_tokens"]), int(raw["output_tokens"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            logger.warning("teacher cache: unreadable entry %s (%s); treated as a miss", key, e)
            return None

    def put(self, key: str, answer: Answer) -> None:
        if self.root is None:
            return
        try:
            write_atomic(self._path(key), json.dumps(asdict(answer), ensure_ascii=False))
        except OSError as e:
            logger.warning("teacher cache: could not write %s under %s: %s", key, self.root, e)
