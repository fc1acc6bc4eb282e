"""Fetching one sdist (`NAME==VERSION`) without running any of its code: no pip, no build backend, no setup.py.

A package's own code is untrusted on the host that holds every package's output, so the archive is chosen from what
the index lists and downloaded as bytes:

1. Candidates: each `find_links` entry (a folder's files, or the links of an HTML page at a URL), then the index's
   project page `{index_url}/{normalized-name}/` (PEP 503 HTML or PEP 691 JSON, asked for by `Accept`; a `file://`
   index reads the folder's `index.html`). A candidate is an sdist (`.tar.gz` or `.zip`) whose file name parses as
   `<name>-<version>` with the same normalised name (PEP 503) and the same version (PEP 440) as the spec; the first
   one found is taken. A yanked file is still taken, as pip takes it for an exact `==` pin (PEP 592).
2. Download with httpx (bounded time per read and in all, bounded size), the sha256 the index gives (`#sha256=` link
   fragment or JSON `hashes`) checked, then written atomically.

The caller unpacks it (tarfile's `data` filter) and reads its `PKG-INFO`; nothing else of the package is read here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import httpx
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from composer_prime.atomic import write_atomic

DEFAULT_INDEX = "https://pypi.org/simple"
"""The index pip uses when none is configured."""
MAX_SDIST_BYTES = 200 * 1024 * 1024
"""The largest sdist fetched (the largest common sdists, scipy's and numpy's, are well under 100 MiB)."""
MAX_PAGE_BYTES = 20 * 1024 * 1024
"""The largest index page read (a project page with thousands of files is a few MiB)."""
READ_TIMEOUT_S = 60.0
"""Longest wait for the server to connect or send the next bytes."""
FETCH_DEADLINE_S = 900.0
"""Longest one download (page or archive) may take in all."""
SDIST_SUFFIXES = (".tar.gz", ".zip")
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"


class FetchError(Exception):
    """An sdist could not be found or fetched; the message names the package, the URL and the fix."""


@dataclass(frozen=True)
class Candidate:
    filename: str
    url: str
    sha256: str | None
    yanked: bool


def fetch(
    name: str, version: str, into: Path, index_url: str | None, find_links: list[str], max_bytes: int = MAX_SDIST_BYTES
) -> Path:
    """Download the sdist of `name==version` into the folder `into`; the archive's path. Raises FetchError."""
    spec = f"{name}=={version}"
    looked: list[str] = []
    seen: list[Candidate] = []
    for source in [*find_links, None]:
        candidates = _find_links(source) if source is not None else _index_page(spec, name, index_url)
        looked.append(source if source is not None else _project_url(index_url, name))
        match = next((c for c in candidates if _is_sdist_of(c.filename, name, version)), None)
        if match is not None:
            return _download(spec, match, into, max_bytes)
        seen.extend(candidates)
    raise FetchError(_why_missing(spec, name, version, seen, looked))


def _file_release(filename: str, name: str) -> str | None:
    """The version an sdist's or a wheel's file name gives, when the file is one of `name`'s."""
    lower = filename.lower()
    if lower.endswith(".whl"):
        parts = filename[:-4].split("-")
        return parts[1] if len(parts) >= 5 and canonicalize_name(parts[0]) == canonicalize_name(name) else None
    suffix = next((s for s in SDIST_SUFFIXES if lower.endswith(s)), None)
    if suffix is None:
        return None
    file_name, sep, file_version = filename[: -len(suffix)].rpartition("-")
    return file_version if sep and canonicalize_name(file_name) == canonicalize_name(name) else None


def _why_missing(spec: str, name: str, version: str, seen: list[Candidate], looked: list[str]) -> str:
    """Which of the name, the version or the sdist is missing where fetch looked, and the fix."""
    where = ", ".join(looked)
    releases: dict[str, list[str]] = {}
    for candidate in seen:
        release = _file_release(candidate.filename, name)
        if release is not None:
            releases.setdefault(release, []).append(candidate.filename)
    if not releases:
        return f"{spec}: no project named {name!r} at {where}; check the spelling of the name (as pip installs it)"

    def key(text: str) -> tuple[int, Version | str]:
        try:
            return (1, Version(text))
        except InvalidVersion:
            return (0, text)

    same = next((files for release, files in releases.items() if key(release) == key(version)), None)
    if same is None:
        latest = ", ".join(sorted(releases, key=key, reverse=True)[:5])
        return (
            f"{spec}: {name} has no release {version} at {where}; its releases there include {latest}: pin one of those"
        )
    return (
        f"{spec}: this release has no sdist (.tar.gz or .zip) at {where}, only {', '.join(sorted(same)[:3])}; "
        "mine-corpus reads the tests from an sdist: put one in a find_links folder, or pick a release that has one"
    )


def _project_url(index_url: str | None, name: str) -> str:
    return f"{(index_url or DEFAULT_INDEX).rstrip('/')}/{canonicalize_name(name)}/"


def _is_sdist_of(filename: str, name: str, version: str) -> bool:
    """Whether `filename` is an sdist of exactly `name==version` (names compared normalised, versions by PEP 440)."""
    suffix = next((s for s in SDIST_SUFFIXES if filename.lower().endswith(s)), None)
    if suffix is None:
        return False
    stem = filename[: -len(suffix)]
    file_name, sep, file_version = stem.rpartition("-")
    if not sep or canonicalize_name(file_name) != canonicalize_name(name):
        return False
    try:
        return Version(file_version) == Version(version)
    except InvalidVersion:
        return file_version == version


def _find_links(source: str) -> list[Candidate]:
    """The files of a find_links folder, or the links of the HTML page at a find_links URL."""
    if "://" not in source:
        folder = Path(source).expanduser()
        if not folder.is_dir():
            raise FetchError(f"find_links {source}: no such folder; pass a folder of sdists and wheels or a URL")
        return [Candidate(p.name, p.resolve().as_uri(), None, False) for p in sorted(folder.iterdir()) if p.is_file()]
    body, _ = _get(f"find_links {source}", source, MAX_PAGE_BYTES, accept="text/html", missing_ok=True)
    return _parse_html(body.decode("utf-8", "replace"), source) if body is not None else []


def _index_page(spec: str, name: str, index_url: str | None) -> list[Candidate]:
    """The files the index's project page lists (none when the index has no such project)."""
    url = _project_url(index_url, name)
    if url.startswith("file:"):
        folder = Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path))
        page = folder / "index.html"
        if not page.is_file():
            return []
        return _parse_html(page.read_text("utf-8", "replace"), page.as_uri())
    body, content_type = _get(spec, url, MAX_PAGE_BYTES, accept=ACCEPT, missing_ok=True)
    if body is None:
        return []
    if "json" in content_type:
        try:
            files = json.loads(body)["files"]
            return [
                Candidate(
                    f["filename"],
                    urllib.parse.urljoin(url, f["url"]),
                    (f.get("hashes") or {}).get("sha256"),
                    bool(f.get("yanked")),
                )
                for f in files
            ]
        except (ValueError, KeyError, TypeError) as err:
            raise FetchError(
                f"{spec}: {url} answered JSON that is not a PEP 691 project page ({err}); check index_url"
            ) from None
    return _parse_html(body.decode("utf-8", "replace"), url)


class _Anchors(HTMLParser):
    """The `<a href>` tags of a page: (href, attributes)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.found.append((href, dict(attrs)))


def _parse_html(text: str, base: str) -> list[Candidate]:
    """A PEP 503 page's links: file name from the URL's last path part, sha256 from the `#sha256=` fragment."""
    parser = _Anchors()
    parser.feed(text)
    out = []
    for href, attrs in parser.found:
        url = urllib.parse.urljoin(base, href)
        parts = urllib.parse.urlparse(url)
        filename = urllib.parse.unquote(parts.path.rsplit("/", 1)[-1])
        digest = re.fullmatch(r"sha256=([0-9a-fA-F]{64})", parts.fragment)
        sha256 = digest.group(1).lower() if digest else None
        out.append(Candidate(filename, parts._replace(fragment="").geturl(), sha256, "data-yanked" in attrs))
    return out


def _get(what: str, url: str, max_bytes: int, accept: str, missing_ok: bool = False) -> tuple[bytes | None, str]:
    """GET `url` into memory: (body, content type); (None, "") for a 404 when `missing_ok`. Refuses a body over
    `max_bytes` and a transfer past FETCH_DEADLINE_S; errors name `what`, the URL and the fix."""
    if url.startswith("file:"):
        path = Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path))
        if not path.is_file():
            if missing_ok:
                return None, ""
            raise FetchError(f"{what}: {url} does not exist; check index_url / find_links")
        if path.stat().st_size > max_bytes:
            raise FetchError(
                f"{what}: {url} is {path.stat().st_size} bytes, over the {max_bytes}-byte limit; "
                "refused (mine a smaller release or raise sdist.MAX_SDIST_BYTES)"
            )
        return path.read_bytes(), ""
    began = time.monotonic()
    chunks, size = [], 0
    try:
        with httpx.Client(timeout=READ_TIMEOUT_S, follow_redirects=True, headers={"Accept": accept}) as client:
            with client.stream("GET", url) as response:
                if response.status_code == 404 and missing_ok:
                    return None, ""
                if response.status_code != 200:
                    raise FetchError(
                        f"{what}: {url} answered HTTP {response.status_code}; check index_url / "
                        "find_links and that the server is up"
                    )
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        raise FetchError(
                            f"{what}: {url} is over the {max_bytes}-byte limit; refused (mine a smaller "
                            "release or raise sdist.MAX_SDIST_BYTES)"
                        )
                    if time.monotonic() - began > FETCH_DEADLINE_S:
                        raise FetchError(
                            f"{what}: {url} took over {FETCH_DEADLINE_S:.0f}s; refused (retry later, "
                            "or use a nearer index_url)"
                        )
                    chunks.append(chunk)
                return b"".join(chunks), response.headers.get("content-type", "")
    except httpx.HTTPError as err:
        raise FetchError(
            f"{what}: {url} could not be read ({type(err).__name__}: {err or 'no answer'}); check "
            "index_url / find_links and the network, then run again"
        ) from None


def _download(spec: str, candidate: Candidate, into: Path, max_bytes: int) -> Path:
    body, _ = _get(spec, candidate.url, max_bytes, accept="*/*")
    assert body is not None
    if candidate.sha256 is not None:
        digest = hashlib.sha256(body).hexdigest()
        if digest != candidate.sha256:
            raise FetchError(
                f"{spec}: {candidate.url} has sha256 {digest}, the index says {candidate.sha256}; "
                "refused (a corrupt or tampered file: check the index or mirror)"
            )
    target = into / os.path.basename(candidate.filename)
    write_atomic(target, body)
    return target
