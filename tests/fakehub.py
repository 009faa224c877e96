"""A Hugging Face Hub on loopback for the fetch step's tests: the few endpoints that
``snapshot_download`` and ``HfApi.list_repo_tree`` call, answering as the Hub does (commit
header, ETag = LFS sha256 or git blob id, linked size), so the real huggingface_hub (0.36 and
1.x) downloads through its own code. ``corrupt`` names files whose first GETs return one wrong
byte (what a flaky mirror or disk would hand over); ``gets`` counts the GETs per file.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

LFS_FROM = 1024
"""Files this large or larger are LFS (Xet-backed on today's Hub); smaller ones live in git."""


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def xet_hash(data: bytes) -> str:
    """A stand-in Xet file hash (64 hex): the real one is a Merkle hash only Xet computes."""
    return hashlib.blake2b(data, digest_size=32).hexdigest()


@dataclass
class FakeRepo:
    repo: str
    commit: str
    files: dict[str, bytes]
    corrupt: dict[str, int] = field(default_factory=dict)
    """Per file: how many of its first GETs return one wrong byte."""
    claimed: dict[str, int] = field(default_factory=dict)
    """Sizes the tree lists instead of the real ones (a model too large for this disk)."""
    xet: bool = False
    """List Xet hashes in the tree (hub 1.x then downloads those files through Xet, which this
    server does not speak: for the manifest's tests only)."""
    gets: Counter[str] = field(default_factory=Counter)

    def is_lfs(self, path: str) -> bool:
        return len(self.files[path]) >= LFS_FROM

    def etag(self, path: str) -> str:
        data = self.files[path]
        return hashlib.sha256(data).hexdigest() if self.is_lfs(path) else git_blob_id(data)

    def tree(self) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for path, data in sorted(self.files.items()):
            item: dict[str, object] = {
                "type": "file",
                "path": path,
                "size": self.claimed.get(path, len(data)),
                "oid": git_blob_id(data),
            }
            if self.is_lfs(path):
                item["lfs"] = {
                    "oid": hashlib.sha256(data).hexdigest(),
                    "size": len(data),
                    "pointerSize": 134,
                }
                if self.xet:
                    item["xetHash"] = xet_hash(data)
            out.append(item)
        return out

    def manifest_files(self) -> dict[str, dict[str, object]]:
        """What the fetch step should record from this repo's metadata (the tests' oracle)."""
        out: dict[str, dict[str, object]] = {}
        for path, data in self.files.items():
            entry: dict[str, object] = {"size": len(data)}
            if self.is_lfs(path):
                entry["sha256"] = hashlib.sha256(data).hexdigest()
            else:
                entry["git_sha1"] = git_blob_id(data)
            out[path] = entry
        return out


def _handler(repo: FakeRepo) -> type[BaseHTTPRequestHandler]:
    api = f"/api/models/{repo.repo}/"
    resolve = f"/{repo.repo}/resolve/"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

        def _json(self, doc: object) -> None:
            body = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _missing(self) -> None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _file(self, head: bool) -> None:
            rest = unquote(urlparse(self.path).path)[len(resolve) :]
            _rev, _, path = rest.partition("/")
            if path not in repo.files:
                return self._missing()
            data = repo.files[path]
            if not head:
                repo.gets[path] += 1
                if repo.gets[path] <= repo.corrupt.get(path, 0):
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
            self.send_response(200)
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("ETag", f'"{repo.etag(path)}"')
            if repo.is_lfs(path):
                self.send_header("X-Linked-Etag", f'"{repo.etag(path)}"')
                self.send_header("X-Linked-Size", str(len(data)))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not head:
                self.wfile.write(data)

        def do_HEAD(self) -> None:  # noqa: N802
            if self.path.startswith(resolve):
                return self._file(head=True)
            self._missing()

        def do_GET(self) -> None:  # noqa: N802
            path = urlparse(self.path).path
            if path.startswith(resolve):
                return self._file(head=False)
            if path.startswith(api + "revision/"):
                siblings = [{"rfilename": p} for p in sorted(repo.files)]
                return self._json({"id": repo.repo, "sha": repo.commit, "siblings": siblings})
            if path.startswith(api + "tree/"):
                return self._json(repo.tree())
            self._missing()

    return Handler


@contextmanager
def serve(repo: FakeRepo) -> Iterator[str]:
    """The Hub's endpoint URL (``HF_ENDPOINT``) while the server runs."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(repo))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
