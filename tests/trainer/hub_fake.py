"""A Hugging Face hub on loopback, serving repositories made of local files.

It answers the routes huggingface_hub 2.4.0 calls for `repo_info` + `snapshot_download(local_dir=...)`
(hf_api.py model_info and list_repo_tree, file_download.py get_hf_file_metadata and http_get):

  GET  /api/models/{repo}/revision/{rev}          {"id", "sha"}
  GET  /api/models/{repo}/tree/{commit}            [{"type": "file", "path", "size", "oid"}]
  HEAD /{repo}/resolve/{commit}/{path}             X-Repo-Commit, ETag, Content-Length
  GET  /{repo}/resolve/{commit}/{path}             the bytes (Range honoured: 206)

A gated repository answers 401 with X-Error-Code GatedRepo to requests without its token, as the
hub does. `hold` makes the GET of one file send half its bytes and then wait until released, so a
test can kill the downloader mid-file without sleeping; `drop_once` cuts one GET short. Every request is recorded.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


@dataclass
class Repo:
    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    token: str | None = None  # gated: only this token may read it


@dataclass
class FakeHub:
    repos: dict[str, Repo] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, Authorization
    hold: str | None = None  # a file path whose GET stalls half-way
    drop_once: str | None = None  # a file path whose first GET closes the connection half-way
    ranges: list[tuple[str, str]] = field(default_factory=list)  # (path, Range header) of ranged GETs
    half_sent: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub._answer(self, body=False)

            def do_GET(self):
                hub._answer(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def gets(self, path_suffix: str) -> int:
        """How many GETs of a file ended with `path_suffix`."""
        return sum(1 for m, p, _ in self.requests if m == "GET" and "/resolve/" in p and p.endswith(path_suffix))

    def _find(self, path: str) -> tuple[str, Repo, str] | None:
        for name, repo in self.repos.items():
            if path.startswith(f"/api/models/{name}/") or path.startswith(f"/{name}/resolve/"):
                return name, repo, path
        return None

    def _answer(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlsplit(h.path).path)
        auth = h.headers.get("Authorization")
        self.requests.append((h.command, path, auth))
        found = self._find(path)
        if found is None:
            return self._send(h, 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}, body)
        name, repo, path = found
        if repo.token is not None and auth != f"Bearer {repo.token}":
            return self._send(h, 401, {"error": f"Access to model {name} is restricted."},
                              {"X-Error-Code": "GatedRepo",
                               "X-Error-Message": f"Access to model {name} is restricted and you are not in the "
                                                  "authorized list."}, body)
        if path.startswith(f"/api/models/{name}/revision/"):
            return self._send(h, 200, {"id": name, "sha": repo.commit}, {}, body)
        if path.startswith(f"/api/models/{name}/tree/"):
            entries = [{"type": "file", "path": p, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                       for p, data in sorted(repo.files.items())]
            return self._send(h, 200, entries, {}, body)
        prefix = f"/{name}/resolve/{repo.commit}/"
        filename = path[len(prefix):] if path.startswith(prefix) else None
        if filename not in repo.files:
            return self._send(h, 404, {"error": "Entry not found"},
                              {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": repo.commit}, body)
        data = repo.files[filename]
        start = 0
        rng = h.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if body:
                self.ranges.append((filename, rng))
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                   "Content-Length": str(len(data) - start), "Accept-Ranges": "bytes"}
        h.send_response(206 if start else 200)
        if start:
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        for key, value in headers.items():
            h.send_header(key, value)
        h.end_headers()
        if not body:
            return
        chunk = data[start:]
        if filename == self.drop_once:
            self.drop_once = None
            h.wfile.write(chunk[: len(chunk) // 2])
            h.close_connection = True
            return
        if filename == self.hold:
            h.wfile.write(chunk[: len(chunk) // 2])
            h.wfile.flush()
            self.half_sent.set()
            self.release.wait(60)
            return  # the connection closes short: the client sees a truncated body
        h.wfile.write(chunk)

    @staticmethod
    def _send(h, status: int, payload, headers: dict, body: bool) -> None:
        data = json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            h.send_header(key, value)
        h.end_headers()
        if body:
            h.wfile.write(data)
