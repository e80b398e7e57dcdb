#!/usr/bin/env python3
"""schema/openapi.json against a real `exlr8d serve` (run by ctest as openapi_test).

usage: openapi_test.py EXLR8D SCHEMA HUBSIM FIXTURE

Starts the hub simulator (HUBSIM) serving FIXTURE as exlr8/tiny, and
`exlr8d serve` on a scratch cache (Unix socket and a loopback port, the
simulator as its hub, /bin/false as its exlr8d-stage), and checks:
  - the document is OpenAPI 3.1, every $ref resolves, every operation has
    responses, and GET /v1/openapi.json serves exactly this file (over TCP
    without a token, as GET /v1/health);
  - the routes the server lists in its 404 for an unknown path are exactly
    the document's paths;
  - every path of the document with every method: a documented method gets
    a documented status (never the 404 of an unknown route) and a body that
    matches the documented schema of that status and content type; any
    other method gets 405 whose Allow lists exactly the documented methods
    (and HEAD with GET);
  - real answers of every operation, errors included (400, 401, 404, 405,
    409, 415, 202 with Location), each validated against the document:
    jobs that fail (a dead endpoint, a repo never pulled) and cancelled
    ones, then a real pull of the fixture's rank and what it fills in (the
    fileset, the rank, the pull, a verify job's report, an evict job refused
    by the pin, a stage).
Python's standard library only (no jsonschema: a small validator below
covers the keywords the document uses, and fails on any other).
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

METHODS = ["GET", "POST", "DELETE", "PUT", "PATCH"]
FAILURES = []


def fail(msg):
    FAILURES.append(msg)
    print("FAIL: " + msg, file=sys.stderr)


# ---- a JSON Schema validator for the keywords the document uses ----
KNOWN = {"type", "properties", "required", "additionalProperties", "items", "enum", "const", "oneOf", "anyOf",
         "minimum", "maximum", "minLength", "maxItems", "pattern", "format", "description", "default", "$ref"}
TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def type_ok(value, t):
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, TYPES[t])


def validate(doc, schema, value, where):
    """Errors of `value` against `schema` (a list of strings)."""
    unknown = set(schema) - KNOWN
    if unknown:
        return [f"{where}: the test's validator knows no {sorted(unknown)}"]
    if "$ref" in schema:
        return validate(doc, resolve(doc, schema["$ref"]), value, where)
    errors = []
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(type_ok(value, t) for t in types):
            return [f"{where}: {json.dumps(value)[:80]} is not {'/'.join(types)}"]
    if "const" in schema and value != schema["const"]:
        errors.append(f"{where}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where}: {value} < {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where}: {value} > {schema['maximum']}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{where}: shorter than {schema['minLength']}")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{where}: no member {name!r}")
        extra = schema.get("additionalProperties", True)
        for name, member in value.items():
            if name in props:
                errors += validate(doc, props[name], member, f"{where}.{name}")
            elif extra is False:
                errors.append(f"{where}: member {name!r} is not in the document")
            elif isinstance(extra, dict):
                errors += validate(doc, extra, member, f"{where}.{name}")
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{where}: more than {schema['maxItems']} items")
        for i, item in enumerate(value):
            if "items" in schema:
                errors += validate(doc, schema["items"], item, f"{where}[{i}]")
    for key in ("oneOf", "anyOf"):
        if key in schema:
            matches = [s for s in schema[key] if not validate(doc, s, value, where)]
            if (key == "oneOf" and len(matches) != 1) or (key == "anyOf" and not matches):
                errors.append(f"{where}: {len(matches)} of {key} match {json.dumps(value)[:120]}")
    return errors


def resolve(doc, ref):
    if not ref.startswith("#/"):
        raise ValueError("not a local $ref: " + ref)
    node = doc
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def check_refs(doc, node, where="#"):
    if isinstance(node, dict):
        if "$ref" in node:
            try:
                resolve(doc, node["$ref"])
            except (KeyError, ValueError):
                fail(f"{where}: $ref {node['$ref']} does not resolve")
        for k, v in node.items():
            check_refs(doc, v, f"{where}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            check_refs(doc, v, f"{where}/{i}")


# ---- talking to the server ----
class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=10)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(self.unix_path)


class HubSim:
    def __init__(self, binary, fixture, work):
        port_file = os.path.join(work, "hubsim.port")
        self.proc = subprocess.Popen([binary, "--repo", "exlr8/tiny=" + fixture, "--port-file", port_file],
                                     stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "hubsim.log"), "w"))
        deadline = time.monotonic() + 20
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("exlr8-hubsim did not start (see %s/hubsim.log)" % work)
            time.sleep(0.05)
        with open(port_file) as f:
            self.hub = re.search(r"hub=(\S+)", f.read()).group(1)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Server:
    def __init__(self, exlr8d, work, hub):
        self.cache = os.path.join(work, "cache")
        self.socket = os.path.join(work, "s.sock")
        # A hub endpoint nothing answers on, for jobs that must fail.
        dead = socket.socket()
        dead.bind(("127.0.0.1", 0))
        self.dead_endpoint = "http://127.0.0.1:%d" % dead.getsockname()[1]
        dead.close()
        env = dict(os.environ, HF_HOME=os.path.join(work, "hf"))  # no hub token of this machine's
        for name in ("HF_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE", "HF_ENDPOINT"):
            env.pop(name, None)
        self.proc = subprocess.Popen(
            [exlr8d, "serve", "--cache", self.cache, "--socket", self.socket, "--listen", "127.0.0.1:0",
             "--endpoint", hub, "--stage-binary", "/bin/false"],
            stdout=subprocess.PIPE, stderr=open(os.path.join(work, "serve.log"), "w"), text=True, env=env)
        line = self.proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if not m:
            raise SystemExit("exlr8d serve did not start: %r (see %s/serve.log)" % (line, work))
        self.port = int(m.group(1))
        with open(os.path.join(self.cache, "exlr8d.api-token")) as f:
            self.token = f.read().strip()

    def request(self, method, path, body=None, tcp=False, token=True, content_type="application/json"):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10) if tcp else UnixConnection(self.socket)
        headers = {}
        if tcp and token:
            headers["Authorization"] = "Bearer " + self.token
        data = None
        if body is not None:
            data = body if isinstance(body, str) else json.dumps(body)
            headers["Content-Type"] = content_type
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        raw = r.read()
        conn.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, raw

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# ---- the document's view of an answer ----
def template_of(doc, path):
    """The document's path template that `path` (no query) falls under, or None."""
    for template in doc["paths"]:
        if re.fullmatch(re.sub(r"\\\{[a-z_]+\\\}", r"[^/]+", re.escape(template)), path):
            return template
    return None


SEEN = set()  # (template, method, status) answered and checked


def check_answer(doc, method, target, status, headers, raw, what=""):
    path = target.split("?")[0]
    label = f"{method} {target}{' (' + what + ')' if what else ''} -> {status}"
    template = template_of(doc, path)
    if template is None:
        fail(f"{label}: {path} is not in the document")
        return None
    if status == 404 and b"no route" in raw:
        fail(f"{label}: the server knows no route {path}")
    item = doc["paths"][template]
    op = item.get("get" if method == "HEAD" else method.lower())  # HEAD: the GET's header
    if op is None:
        documented = sorted(m.upper() for m in item if m in ("get", "post", "delete", "put", "patch"))
        expected = set(documented) | ({"HEAD"} if "GET" in documented else set())
        allow = {m.strip() for m in headers.get("allow", "").split(",") if m.strip()}
        if status != 405:
            fail(f"{label}: {method} is not documented for {template}, but the answer is not 405")
        elif allow != expected:
            fail(f"{label}: Allow is {sorted(allow)}, the document says {sorted(expected)}")
        response = resolve_response(doc, doc["components"]["responses"]["MethodNotAllowed"])
    else:
        response = op["responses"].get(str(status))
        if response is None:
            fail(f"{label}: status {status} is not documented for {method.upper()} {template} "
                 f"(documented: {sorted(op['responses'])}); body {raw[:200]!r}")
            return None
        response = resolve_response(doc, response)
    SEEN.add((template, method.upper(), status))
    for name, header in response.get("headers", {}).items():
        header = resolve_response(doc, header)
        value = headers.get(name.lower())
        if value is None:
            fail(f"{label}: no {name} header")
        else:
            for e in validate(doc, header["schema"], value, f"{label} header {name}"):
                fail(e)
    if method == "HEAD":
        return None
    content = response.get("content", {})
    ctype = headers.get("content-type", "")
    if ctype not in content:
        fail(f"{label}: Content-Type {ctype!r} is not documented (documented: {sorted(content)})")
        return None
    if not ctype.startswith("application/") or "json" not in ctype:
        return raw
    try:
        body = json.loads(raw)
    except ValueError as e:
        fail(f"{label}: not JSON ({e}): {raw[:200]!r}")
        return None
    for e in validate(doc, content[ctype]["schema"], body, label):
        fail(e)
    return body


def resolve_response(doc, node):
    while "$ref" in node:
        node = resolve(doc, node["$ref"])
    return node


def main():
    exlr8d, schema_path, hubsim_binary, fixture = sys.argv[1:5]
    with open(schema_path, "rb") as f:
        schema_bytes = f.read()
    doc = json.loads(schema_bytes)

    # ---- the document itself ----
    if not str(doc.get("openapi", "")).startswith("3.1."):
        fail("openapi is not 3.1.x: %r" % doc.get("openapi"))
    check_refs(doc, doc)
    for template, item in doc["paths"].items():
        for method, op in item.items():
            if method == "parameters":
                continue
            if "responses" not in op or not op["responses"]:
                fail(f"{method.upper()} {template}: no responses")
            if "operationId" not in op:
                fail(f"{method.upper()} {template}: no operationId")

    work = tempfile.mkdtemp(prefix="exlr8-openapi-")
    hubsim = HubSim(hubsim_binary, fixture, work)
    server = None
    try:
        server = Server(exlr8d, work, hubsim.hub)
        run(doc, schema_bytes, server)
    finally:
        if server:
            server.stop()
        hubsim.stop()
        if not FAILURES:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("openapi_test: the server's log and cache are in " + work, file=sys.stderr)
    # Every documented operation was answered at least once.
    for template, item in doc["paths"].items():
        for method in item:
            if method != "parameters" and not any(t == template and m == method.upper() for t, m, _ in SEEN):
                fail(f"{method.upper()} {template} was never exercised")
    if FAILURES:
        print(f"openapi_test: {len(FAILURES)} failure(s)", file=sys.stderr)
        return 1
    print(f"openapi_test: ok ({len(SEEN)} (route, method, status) answers checked against {schema_path})")
    return 0


def run(doc, schema_bytes, s):
    """The answers, each checked against the document (check_answer)."""
    def call(method, target, body=None, what="", **kw):
        status, headers, raw = s.request(method, target, body, **kw)
        return status, headers, check_answer(doc, method, target, status, headers, raw, what)

    # The served document is this file.
    for tcp in (False, True):
        status, _, raw = s.request("GET", "/v1/openapi.json", tcp=tcp, token=False)
        if status != 200 or raw != schema_bytes:
            fail(f"GET /v1/openapi.json ({'TCP, no token' if tcp else 'socket'}): {status}, "
                 f"{'the same bytes' if raw == schema_bytes else 'not the file'}")

    # The server's own list of routes (its 404 for an unknown path).
    status, _, raw = s.request("GET", "/v1/no-such-route")
    m = re.search(r"routes: ([^\"]*)\"", raw.decode())
    if status != 404 or not m:
        fail(f"GET /v1/no-such-route: {status} {raw[:200]!r}")
    else:
        listed = [r.strip() for r in m.group(1).split(",")]
        if sorted(listed) != sorted(doc["paths"]):
            fail(f"the server routes {sorted(set(listed) - set(doc['paths']))} the document lacks, and the "
                 f"document has {sorted(set(doc['paths']) - set(listed))} the server does not list")

    # Every path, every method: a documented status and body, or a 405
    # naming the documented methods. A body of {} (refused: 400).
    for template in doc["paths"]:
        target = template.replace("{id}", "999999")
        if template == "/v1/ranks":
            target += "?repo=a%2Fb&manifest=home&tp=1&rank=0"
        for method in METHODS:
            call(method, target, {} if method in ("POST", "PUT", "PATCH") else None, "probe")
            call(method, target, {} if method in ("POST", "PUT", "PATCH") else None, "probe over TCP", tcp=True)
        if "get" in doc["paths"][template]:
            status, headers, _ = s.request("HEAD", target)
            if status == 405:
                fail(f"HEAD {target}: 405")

    # Real answers, errors included.
    call("GET", "/v1/health")
    call("GET", "/v1/filesets")
    call("GET", "/v1/pulls")
    call("GET", "/v1/ranks?repo=a%2Fb&manifest=home&tp=4")  # 400: no rank
    call("GET", "/v1/ranks?repo=a%2Fb&manifest=home&tp=4&rank=1&colour=red")  # 400: unknown
    call("GET", "/v1/jobs?state=sleeping")  # 400
    call("POST", "/v1/pulls", {"repo": "exlr8/none", "manifest": "home", "tp": 4, "rank": 9})  # 400
    call("POST", "/v1/pulls", {"repo": "exlr8/none", "manifest": "home", "tp": 4, "rank": 1, "colour": 1})  # 400
    call("POST", "/v1/pulls", "not json")  # 400
    call("POST", "/v1/pulls", "{}", what="text/plain over TCP", tcp=True, content_type="text/plain")  # 415
    call("GET", "/v1/jobs", what="no token", tcp=True, token=False)  # 401
    call("POST", "/v1/evict", {"repo": "a/b"}, what="no token", tcp=True, token=False)  # 401
    # Jobs of a repo the hub does not have, through an endpoint nothing
    # answers on: they fail, or are cancelled.
    status, headers, body = call("POST", "/v1/pulls", {"repo": "exlr8/none", "manifest": "home", "tp": 4,
                                                      "rank": 1, "pin": "t", "make_room": True,
                                                      "endpoint": s.dead_endpoint})
    if status != 202:
        fail(f"POST /v1/pulls: {status}")
    else:
        job = body["job"]["id"]
        if headers.get("location") != f"/v1/jobs/{job}":
            fail(f"POST /v1/pulls: Location {headers.get('location')!r}")
        call("GET", f"/v1/jobs/{job}")
        call("GET", "/v1/jobs")
        call("GET", "/v1/jobs?state=queued", tcp=True)
        call("DELETE", f"/v1/jobs/{job}")  # 202
        call("DELETE", f"/v1/jobs/{job}", what="again")  # 202 or 409 once cancelled
    for path in ("/v1/verify", "/v1/evict"):
        status, _, _ = call("POST", path, {"repo": "exlr8/none", "revision": "main"})
        if status != 202:
            fail(f"POST {path}: {status}")
        call("POST", path, {"revision": "main"})  # 400: no repo
    call("GET", "/v1/jobs")
    # A pull the cache has (once a job ran it) or none: 200/404; its DELETE 404/409.
    call("GET", "/v1/pulls/1")
    call("DELETE", "/v1/pulls/1")
    call("GET", "/v1/pulls/x")  # 404: not an id
    stage_req = {"repo": "exlr8/tiny", "manifest": "home", "tp": 4, "rank": 1, "memory": "device", "lease": "v2",
                 "check": "all", "release_wait_s": 1}
    status, headers, body = call("POST", "/v1/stages", stage_req)
    if status != 202:
        fail(f"POST /v1/stages: {status}")
    else:
        stage = body["stage"]["id"]
        if headers.get("location") != f"/v1/stages/{stage}":
            fail(f"POST /v1/stages: Location {headers.get('location')!r}")
        call("GET", f"/v1/stages/{stage}")
        call("GET", "/v1/stages")
        call("POST", "/v1/stages", stage_req, what="the same rank again")  # 202, or 409 while it lives
        call("DELETE", f"/v1/stages/{stage}")  # 202 (live) or 200 (forgotten)
    call("POST", "/v1/stages", dict(stage_req, device=-1))  # 400
    call("GET", "/metrics")
    call("GET", "/metrics", tcp=True)
    call("HEAD", "/v1/filesets")
    real_pull(call)


def wait_for_job(call, job, what):
    """Polls GET /v1/jobs/{job} (each answer checked) until it is finished."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        status, _, body = call("GET", f"/v1/jobs/{job}", what=what)
        if status != 200 or body is None:
            return None
        if body["job"]["state"] in ("done", "failed", "cancelled"):
            return body["job"]
        time.sleep(0.1)
    fail(f"{what}: job {job} not finished after 90 s")
    return None


def real_pull(call):
    """A pull of the fixture's rank from the simulator, and what it fills in."""
    tiny = {"repo": "exlr8/tiny", "manifest": "home", "tp": 4, "rank": 1}
    status, _, body = call("POST", "/v1/pulls", dict(tiny, pin="openapi"))
    if status != 202:
        return fail(f"POST /v1/pulls of exlr8/tiny: {status}")
    job = wait_for_job(call, body["job"]["id"], "the real pull")
    if job is None or job["state"] != "done":
        return fail(f"the pull of exlr8/tiny did not finish: {job}")
    status, _, body = call("GET", "/v1/filesets")
    if status != 200 or not body or [f["repo"] for f in body["filesets"]] != ["exlr8/tiny"]:
        fail(f"GET /v1/filesets after the pull: {status} {body}")
    status, _, body = call("GET", "/v1/ranks?repo=exlr8/tiny&manifest=home&tp=4&rank=1")
    if status != 200 or not body or body["rank"]["complete"] is not True:
        fail(f"GET /v1/ranks after the pull: {status} {body}")
    call("GET", "/v1/ranks?repo=exlr8/tiny&manifest=elsewhere&tp=4&rank=1")  # 404
    call("GET", "/v1/pulls")
    status, _, body = call("GET", f"/v1/pulls/{job['pull']}")
    if status != 200:
        fail(f"GET /v1/pulls/{job['pull']}: {status}")
    status, _, _ = call("DELETE", f"/v1/pulls/{job['pull']}")  # 409: finished
    if status != 409:
        fail(f"DELETE /v1/pulls/{job['pull']} of a finished pull: {status}, not 409")
    status, _, body = call("POST", "/v1/verify", {"repo": "exlr8/tiny"})
    if status == 202:
        verify = wait_for_job(call, body["job"]["id"], "the verify job")
        if verify is None or verify["state"] != "done" or not isinstance(verify.get("result"), dict):
            fail(f"the verify job: {verify}")
    status, _, body = call("POST", "/v1/evict", {"repo": "exlr8/tiny"})
    if status == 202:
        evict = wait_for_job(call, body["job"]["id"], "the evict job")
        if evict is None or evict["state"] != "failed":  # pinned by "openapi"
            fail(f"the evict job of a pinned fileset: {evict}")
    call("GET", "/v1/jobs")
    status, _, body = call("POST", "/v1/stages", dict(tiny, memory="host"))
    if status == 202:
        call("GET", f"/v1/stages/{body['stage']['id']}")
    call("GET", "/v1/stages")
    call("GET", "/metrics")


if __name__ == "__main__":
    sys.exit(main())
