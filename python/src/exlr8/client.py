"""exlr8.Client: a small client of the REST API of ``exlr8d serve``
(docs/OPERATIONS.md, "The REST API").

    c = exlr8.Client("/var/cache/exlr8/exlr8d.sock")          # the Unix socket: no token
    c = exlr8.Client("http://127.0.0.1:8478", token_file="/var/cache/exlr8/exlr8d.api-token")
    job = c.submit_pull("exlr8/tiny", "home", tp=4, rank=1)
    job = c.wait_job(job["id"], timeout=600)
    if c.rank("exlr8/tiny", "home", 4, 1)["complete"]: ...

Answers are the decoded JSON objects (dicts), unwrapped from their one
member ({"job": {...}} gives the job). An error answer raises ApiError
with the HTTP status and the server's message (its problem details'
``error.message``, else ``detail``); a connection that fails raises
ApiError with status 0. http.client over a Unix socket or TCP; one
connection per request (the server closes idle ones after 30 s anyway).
Not synchronized: one Client per thread.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
import urllib.parse
from typing import Any, Callable, Dict, List, Optional

from .errors import ApiError

FINISHED = ("done", "failed", "cancelled")


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


class Client:
    """``target``: the server's Unix socket (a path, or "unix:PATH"), or
    "http://HOST:PORT" of its --listen. Over TCP every route but
    /v1/health needs the API token: ``token``, or ``token_file`` (the
    file serve names; read once, surrounding whitespace dropped)."""

    def __init__(self, target: str, token: Optional[str] = None, token_file: Optional[str] = None,
                 timeout: float = 30.0):
        target = os.fspath(target)
        self.timeout = timeout
        if target.startswith("http://"):
            u = urllib.parse.urlsplit(target)
            if not u.hostname:
                raise ValueError(f"exlr8.Client: no host in {target!r}")
            self._unix = None
            self._host, self._port = u.hostname, u.port or 80
            self._prefix = u.path.rstrip("/")
        elif target.startswith("https://"):
            raise ValueError("exlr8.Client: exlr8d serves plain HTTP on loopback only, not https")
        else:
            self._unix = target[5:] if target.startswith("unix:") else target
            self._prefix = ""
        if token is None and token_file is not None:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
        self._token = token
        self.target = target

    # -- plumbing --------------------------------------------------------------

    def _connection(self) -> http.client.HTTPConnection:
        if self._unix is not None:
            return _UnixConnection(self._unix, self.timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)

    def request(self, method: str, path: str, body: Optional[Dict[str, Any]] = None,
                query: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """One request; the decoded JSON answer. ApiError for an error status,
        a non-JSON answer or a connection that fails."""
        if query:
            path += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = "Bearer " + self._token
        conn = self._connection()
        try:
            conn.request(method, self._prefix + path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            status = resp.status
        except (OSError, http.client.HTTPException) as e:
            raise ApiError(0, f"cannot reach exlr8d serve at {self.target}: {e}", method, path) from None
        finally:
            conn.close()
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            answer = None
        if status >= 400:
            msg = ""
            if isinstance(answer, dict):
                err = answer.get("error")
                if isinstance(err, dict):
                    msg = str(err.get("message", ""))
                elif isinstance(err, str):
                    msg = err
                msg = msg or str(answer.get("detail", ""))
            if not msg:
                msg = raw[:200].decode("utf-8", "replace") or http.client.responses.get(status, "")
            raise ApiError(status, msg, method, path, answer)
        if not isinstance(answer, dict):
            raise ApiError(status, "the answer is not a JSON object", method, path, None)
        return answer

    @staticmethod
    def _one(answer: Dict[str, Any], key: str) -> Any:
        return answer[key] if key in answer else answer

    # -- the routes ----------------------------------------------------------------

    def health(self) -> Dict[str, Any]:
        """{"status": "ok", "cache": DIR, "version": V}."""
        return self.request("GET", "/v1/health")

    def filesets(self) -> List[Dict[str, Any]]:
        """Every fileset of the cache (``exlr8d list --json``'s)."""
        return self._one(self.request("GET", "/v1/filesets"), "filesets")

    def rank(self, repo: str, manifest: str, tp: int, rank: int, revision: Optional[str] = None) -> Dict[str, Any]:
        """Whether that rank is complete in the cache (``exlr8d status --json``'s object)."""
        return self._one(self.request("GET", "/v1/ranks", query={"repo": repo, "manifest": manifest, "tp": tp,
                                                                 "rank": rank, "revision": revision}), "rank")

    def pulls(self) -> List[Dict[str, Any]]:
        return self._one(self.request("GET", "/v1/pulls"), "pulls")

    def pull(self, pull_id: int) -> Dict[str, Any]:
        return self._one(self.request("GET", f"/v1/pulls/{int(pull_id)}"), "pull")

    def submit_pull(self, repo: str, manifest: str, tp: int, rank: int, revision: Optional[str] = None,
                    endpoint: Optional[str] = None, pin: Optional[str] = None,
                    make_room: Optional[bool] = None) -> Dict[str, Any]:
        """Queues a pull job; the job (its "id" for job() and wait_job())."""
        body = {"repo": repo, "manifest": manifest, "tp": tp, "rank": rank}
        for k, v in (("revision", revision), ("endpoint", endpoint), ("pin", pin), ("make_room", make_room)):
            if v is not None:
                body[k] = v
        return self._one(self.request("POST", "/v1/pulls", body), "job")

    def jobs(self, state: Optional[str] = None) -> List[Dict[str, Any]]:
        return self._one(self.request("GET", "/v1/jobs", query={"state": state}), "jobs")

    def job(self, job_id: int) -> Dict[str, Any]:
        return self._one(self.request("GET", f"/v1/jobs/{int(job_id)}"), "job")

    def cancel_job(self, job_id: int) -> Dict[str, Any]:
        return self._one(self.request("DELETE", f"/v1/jobs/{int(job_id)}"), "job")

    def wait_job(self, job_id: int, timeout: Optional[float] = None, interval: float = 0.2,
                 on_progress: Optional[Callable[[Dict[str, Any]], Any]] = None) -> Dict[str, Any]:
        """Follows a job until it is done, failed or cancelled; returns it
        (check its "state" and "error"). ``on_progress(job)`` is called on
        each poll. TimeoutError after ``timeout`` seconds (None: no limit)."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if on_progress is not None:
                on_progress(job)
            if job.get("state") in FINISHED:
                return job
            if end is not None and time.monotonic() >= end:
                raise TimeoutError(f"job {job_id} is still {job.get('state')} after {timeout:g} s")
            time.sleep(interval)

    def verify(self, repo: str, revision: Optional[str] = None) -> Dict[str, Any]:
        """Queues a verify job of that fileset."""
        body = {"repo": repo}
        if revision is not None:
            body["revision"] = revision
        return self._one(self.request("POST", "/v1/verify", body), "job")

    def evict(self, repo: str, revision: Optional[str] = None) -> Dict[str, Any]:
        """Queues an evict job of that fileset."""
        body = {"repo": repo}
        if revision is not None:
            body["revision"] = revision
        return self._one(self.request("POST", "/v1/evict", body), "job")

    def stages(self) -> List[Dict[str, Any]]:
        return self._one(self.request("GET", "/v1/stages"), "stages")

    def stage(self, stage_id: int) -> Dict[str, Any]:
        """One holder: "state", "lease" (the socket for exlr8.Lease, once "holding"), "holder", ..."""
        return self._one(self.request("GET", f"/v1/stages/{int(stage_id)}"), "stage")

    def start_stage(self, repo: str, manifest: str, tp: int, rank: int, revision: Optional[str] = None,
                    memory: Optional[str] = None, lease: Optional[str] = None, device: Optional[int] = None,
                    check: Optional[str] = None, release_wait_s: Optional[int] = None) -> Dict[str, Any]:
        """Starts a holder (POST /v1/stages); the stage. ``memory``: "device"
        (the server's default) or "host"; ``lease``: "v2" or "v1"; None
        leaves a field to the server."""
        body: Dict[str, Any] = {"repo": repo, "manifest": manifest, "tp": tp, "rank": rank}
        for k, v in (("revision", revision), ("memory", memory), ("lease", lease), ("device", device),
                     ("check", check), ("release_wait_s", release_wait_s)):
            if v is not None:
                body[k] = v
        return self._one(self.request("POST", "/v1/stages", body), "stage")

    def release_stage(self, stage_id: int) -> Dict[str, Any]:
        """DELETE /v1/stages/{id}: a live holder is told to release; a
        finished record is forgotten. The answer: {"stage": ..., and
        "forgotten": true for the latter}."""
        return self.request("DELETE", f"/v1/stages/{int(stage_id)}")

    def wait_stage(self, stage_id: int, states=("holding", "released", "failed", "died"),
                   timeout: Optional[float] = None, interval: float = 0.2) -> Dict[str, Any]:
        """Polls a stage until its state is one of ``states``."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            s = self.stage(stage_id)
            if s.get("state") in states:
                return s
            if end is not None and time.monotonic() >= end:
                raise TimeoutError(f"stage {stage_id} is still {s.get('state')} after {timeout:g} s")
            time.sleep(interval)
