"""mine-corpus fetches an sdist without running its code: a real simple index on 127.0.0.1 serves a hostile sdist
(its in-tree build backend and its setup.py write a marker file when run); fetching it must not. Also: the sha256
the index gives is checked, an oversized file is refused, find_links folders and pages are used, and an sdist
without PKG-INFO is refused rather than built."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from composer_prime.corpus import sdist, sources

SERVER_LIFETIME_S = 120.0
"""The index stops itself after this long, whatever the test does."""


def hostile_sdist(marker: Path, name: str = "evil", version: str = "1.0", pkg_info: bool = True) -> bytes:
    """An sdist whose build backend (in-tree, so pip needs nothing from an index to run it) and setup.py write
    `marker` the moment they are imported."""
    plant = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')\n"
    backend = plant + (  # a working backend: `pip download` of the sdist succeeds, having run it
        "def get_requires_for_build_wheel(config_settings=None):\n    return []\n"
        "def prepare_metadata_for_build_wheel(directory, config_settings=None):\n"
        f"    info = pathlib.Path(directory) / '{name}-{version}.dist-info'\n    info.mkdir()\n"
        f"    (info / 'METADATA').write_text('Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n')\n"
        "    return info.name\n"
    )
    files = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n',
        "backend.py": backend,
        "setup.py": plant,
        f"{name}/__init__.py": "def answer():\n    return 42\n",
    }
    if pkg_info:
        files["PKG-INFO"] = (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nLicense: MIT\nRequires-Dist: attrs\n"
        )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-{version}/{path}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class Index:
    """A PEP 503/691 index on 127.0.0.1: `routes` maps a path to (body, content type); JSON is served to clients
    that ask for it (`Accept`), when the route has a JSON twin under `path + "#json"`."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[bytes, str]] = {}
        self.requests: list[str] = []
        routes, requests = self.routes, self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                requests.append(self.path)
                wants_json = "vnd.pypi.simple.v1+json" in self.headers.get("Accept", "")
                found = (wants_json and routes.get(self.path + "#json")) or routes.get(self.path)
                if not found:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", found[1])
                self.send_header("Content-Length", str(len(found[0])))
                self.end_headers()
                self.wfile.write(found[0])

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.stopper = threading.Timer(SERVER_LIFETIME_S, self.server.shutdown)

    def serve(self, filename: str, data: bytes, sha256: str | None = None, project: str = "evil") -> None:
        """List `filename` on the project page (HTML with a `#sha256=` fragment, and JSON with `hashes`)."""
        digest = sha256 or hashlib.sha256(data).hexdigest()
        self.routes[f"/files/{filename}"] = (data, "application/octet-stream")
        self.routes[f"/simple/{project}/"] = (
            f'<html><body><a href="../../files/{filename}#sha256={digest}">{filename}</a></body></html>'.encode(),
            "text/html",
        )
        listed = {"filename": filename, "url": f"/files/{filename}", "hashes": {"sha256": digest}}
        page = {"meta": {"api-version": "1.0"}, "name": project, "files": [listed]}
        self.routes[f"/simple/{project}/#json"] = (json.dumps(page).encode(), "application/vnd.pypi.simple.v1+json")


@pytest.fixture
def index() -> Iterator[Index]:
    served = Index()
    served.thread.start()
    served.stopper.start()
    yield served
    served.stopper.cancel()
    served.server.shutdown()
    served.server.server_close()


def test_a_hostile_sdist_is_fetched_and_read_without_running_its_code(tmp_path, index):
    marker = tmp_path / "marker"
    index.serve("evil-1.0.tar.gz", hostile_sdist(marker))
    tree = sources.fetch_sdist("Evil==1.0.0", tmp_path / "source", f"{index.url}/simple", [])
    meta = sources.read_metadata(tree, "evil", "1.0")
    assert (meta.name, meta.version, meta.license, meta.requires) == ("evil", "1.0", "MIT", ["attrs"])
    assert (tree / "evil" / "__init__.py").is_file()
    assert "/files/evil-1.0.tar.gz" in index.requests
    assert not marker.exists(), "the package's build backend or setup.py ran on the host"


def test_the_html_page_is_read_when_the_index_serves_no_json(tmp_path, index):
    index.serve("evil-1.0.tar.gz", hostile_sdist(tmp_path / "marker"))
    del index.routes["/simple/evil/#json"]
    tree = sources.fetch_sdist("evil==1.0", tmp_path / "source", f"{index.url}/simple/", [])
    assert (tree / "PKG-INFO").is_file() and not (tmp_path / "marker").exists()


def test_a_hash_mismatch_is_refused_and_nothing_is_kept(tmp_path, index):
    index.serve("evil-1.0.tar.gz", hostile_sdist(tmp_path / "marker"), sha256="0" * 64)
    with pytest.raises(sources.SourceError) as raised:
        sources.fetch_sdist("evil==1.0", tmp_path / "source", f"{index.url}/simple", [])
    message = str(raised.value)
    assert message.startswith("evil==1.0: ") and f"{index.url}/files/evil-1.0.tar.gz" in message
    assert "sha256" in message and "refused" in message
    assert not (tmp_path / "source" / "sdist").exists() or not any((tmp_path / "source" / "sdist").iterdir())


def test_an_oversized_sdist_is_refused(tmp_path, index):
    data = hostile_sdist(tmp_path / "marker")
    index.serve("evil-1.0.tar.gz", data)
    with pytest.raises(sdist.FetchError, match=rf"evil==1\.0: .*evil-1\.0\.tar\.gz is over the {len(data) - 1}-byte"):
        sdist.fetch("evil", "1.0", tmp_path / "sdist", f"{index.url}/simple", [], max_bytes=len(data) - 1)
    assert not (tmp_path / "sdist").exists()


def test_only_the_exact_release_is_taken_and_a_missing_one_says_what_is_missing_and_where(tmp_path, index):
    index.serve("evil-1.0.tar.gz", hostile_sdist(tmp_path / "marker"))
    with pytest.raises(sources.SourceError) as raised:
        sources.fetch_sdist("evil==1.0.1", tmp_path / "source", f"{index.url}/simple", [])
    assert (
        f"evil==1.0.1: evil has no release 1.0.1 at {index.url}/simple/evil/; its releases there include 1.0: pin"
        in str(raised.value)
    )
    with pytest.raises(sources.SourceError, match="nosuch==1.0: no project named 'nosuch' at .*check the spelling"):
        sources.fetch_sdist("nosuch==1.0", tmp_path / "source", f"{index.url}/simple", [])  # a 404 project page
    index.serve("evil-2.0-py3-none-any.whl", b"a wheel")
    with pytest.raises(sources.SourceError) as raised:
        sources.fetch_sdist("evil==2.0", tmp_path / "source", f"{index.url}/simple", [])
    assert "evil==2.0: this release has no sdist (.tar.gz or .zip) at " in str(raised.value)
    assert "only evil-2.0-py3-none-any.whl; mine-corpus reads the tests from an sdist" in str(raised.value)


def test_find_links_folders_and_pages_come_before_the_index(tmp_path, index):
    links = tmp_path / "links"
    links.mkdir()
    (links / "evil-1.0-py3-none-any.whl").write_bytes(b"not an sdist")
    (links / "evil-1.0.tar.gz").write_bytes(hostile_sdist(tmp_path / "marker"))
    closed = "http://127.0.0.1:9/simple"  # never asked: the folder has the file
    tree = sources.fetch_sdist("evil==1.0", tmp_path / "a", closed, [str(links)])
    assert (tree / "PKG-INFO").is_file()

    index.serve("evil-1.0.tar.gz", hostile_sdist(tmp_path / "marker"))
    index.routes["/links/"] = (b'<a href="/files/evil-1.0.tar.gz">evil-1.0.tar.gz</a>', "text/html")
    tree = sources.fetch_sdist("evil==1.0", tmp_path / "b", closed, [f"{index.url}/links/"])
    assert (tree / "PKG-INFO").is_file() and not (tmp_path / "marker").exists()


def test_an_sdist_without_pkg_info_is_refused_not_built(tmp_path, index):
    marker = tmp_path / "marker"
    index.serve("evil-1.0.tar.gz", hostile_sdist(marker, pkg_info=False))
    with pytest.raises(sources.SourceError, match=r"evil==1\.0: evil-1\.0\.tar\.gz has no PKG-INFO.*\[\[repos\]\]"):
        sources.fetch_sdist("evil==1.0", tmp_path / "source", f"{index.url}/simple", [])
    assert not marker.exists()


def test_an_unreachable_index_names_the_url_and_the_fix(tmp_path):
    with pytest.raises(sources.SourceError) as raised:
        sources.fetch_sdist("evil==1.0", tmp_path / "source", "http://127.0.0.1:9/simple", [])
    assert "evil==1.0: http://127.0.0.1:9/simple/evil/ could not be read" in str(raised.value)
    assert "check index_url" in str(raised.value)
