"""exlr8.Client against a real exlr8d serve (Unix socket and --listen with
its API token) pulling from the hub simulator."""

import re

import pytest

import exlr8
from conftest import Process, binary


@pytest.fixture(scope="module")
def serve(hub, tmp_path_factory):
    cache = tmp_path_factory.mktemp("serve-cache")
    p = Process([binary("exlr8d"), "serve", "--cache", str(cache), "--endpoint", hub, "--listen", "127.0.0.1:0"],
                cache.parent / "serve.log")
    assert p.read_until("listening on"), p.printed
    url = re.search(r"(http://127\.0\.0\.1:\d+)", p.printed).group(1)
    yield {"socket": str(cache / "exlr8d.sock"), "url": url, "token_file": str(cache / "exlr8d.api-token"),
           "cache": str(cache)}
    assert p.stop() == 0, p.printed


def test_a_pull_submitted_and_followed_completes_the_rank(serve):
    c = exlr8.Client(serve["socket"])
    assert c.health()["status"] == "ok" and c.health()["cache"] == serve["cache"]
    job = c.submit_pull("exlr8/test", "home", 4, 2, pin="node-7")
    assert job["state"] in ("queued", "running") and job["kind"] == "pull" and job["pin"] == "node-7"
    seen = []
    done = c.wait_job(job["id"], timeout=120, on_progress=seen.append)
    assert done["state"] == "done", done
    assert seen and seen[-1]["state"] == "done"
    rank = c.rank("exlr8/test", "home", 4, 2)
    assert rank["complete"] and rank["halves"] == rank["halves_verified"] > 0
    assert not c.rank("exlr8/test", "home", 4, 1)["complete"]
    sets = c.filesets()
    assert [f["repo"] for f in sets] == ["exlr8/test"] and sets[0]["bytes_cached"] > 0
    assert any(j["id"] == job["id"] for j in c.jobs()) and c.jobs(state="failed") == []
    assert c.pull(done["pull"])["state"] == "done" and c.pulls()[0]["id"] == done["pull"]
    assert c.stages() == []


def test_errors_carry_the_status_and_the_servers_message(serve):
    c = exlr8.Client("unix:" + serve["socket"])
    with pytest.raises(exlr8.ApiError) as e:
        c.job(999)
    assert (e.value.status, e.value.message) == (404, "no job 999")
    with pytest.raises(exlr8.ApiError) as e:
        c.submit_pull("exlr8/test", "home", 4, 9)
    assert e.value.status == 400 and "rank" in e.value.message and e.value.body["status"] == 400
    with pytest.raises(exlr8.ApiError) as e:
        c.rank("exlr8/nope", "home", 1, 0)
    assert e.value.status == 404
    done = c.wait_job(c.submit_pull("exlr8/test", "home", 4, 2)["id"], timeout=120)
    with pytest.raises(exlr8.ApiError) as e:
        c.cancel_job(done["id"])
    assert e.value.status == 409


def test_tcp_needs_the_token(serve):
    anon = exlr8.Client(serve["url"])
    assert anon.health()["status"] == "ok"  # the one route without a token
    with pytest.raises(exlr8.ApiError) as e:
        anon.filesets()
    assert e.value.status == 401 and "Bearer" in e.value.message
    authed = exlr8.Client(serve["url"], token_file=serve["token_file"])
    assert isinstance(authed.filesets(), list)
    with pytest.raises(exlr8.ApiError) as e:
        exlr8.Client(serve["url"], token="x" * 32).filesets()
    assert e.value.status == 401


def test_an_unreachable_server_is_status_0(tmp_path):
    with pytest.raises(exlr8.ApiError) as e:
        exlr8.Client(str(tmp_path / "none.sock")).health()
    assert e.value.status == 0 and "cannot reach" in e.value.message


def test_a_host_stage_started_through_the_api_is_leased(serve):
    """POST /v1/stages with memory host: the holder holds, exlr8.Lease takes
    the lease on the socket the stage names, and DELETE releases it."""
    c = exlr8.Client(serve["socket"])
    c.wait_job(c.submit_pull("exlr8/test", "home", 4, 2)["id"], timeout=120)
    try:
        s = c.start_stage("exlr8/test", "home", 4, 2, memory="host", release_wait_s=10)
    except exlr8.ApiError as e:
        if e.status == 501 or (e.status == 400 and "memory" in e.message):
            pytest.skip(f"this exlr8d serve cannot start host holders: {e}")
        raise
    s = c.wait_stage(s["id"], timeout=120)
    assert s["state"] == "holding" and s["lease"], s
    with exlr8.Lease(s["lease"]) as lease:
        assert (lease.tp, lease.rank, lease.memory_kind) == (4, 2, "host")
        assert lease.proof["hashed"]["mismatches"] == 0
        assert c.release_stage(s["id"])["stage"]["id"] == s["id"]
        r = lease.wait_release(30)
        assert r is not None and r.deadline_s == 10
    s = c.wait_stage(s["id"], states=("released", "failed", "died"), timeout=120)
    assert s["state"] == "released", s
    assert c.release_stage(s["id"]).get("forgotten") is True
    with pytest.raises(exlr8.ApiError) as e:
        c.stage(s["id"])
    assert e.value.status == 404


def test_the_clients_requests_agree_with_the_openapi_document(tmp_path):
    """Every request the client makes is a route and method of
    schema/openapi.json, with only the body members and query parameters
    the document names (the document exists from main's API work on)."""
    import json
    import pathlib
    import os
    root = os.environ.get("EXLR8_SOURCE_DIR") or pathlib.Path(__file__).resolve().parents[2]
    doc_path = pathlib.Path(root) / "schema" / "openapi.json"
    if not doc_path.exists():
        pytest.skip(f"{doc_path} is not in this tree")
    doc = json.loads(doc_path.read_text())
    made = []

    class Recorder(exlr8.Client):
        def request(self, method, path, body=None, query=None):
            made.append((method, path, body, query))
            return {"job": {"id": 1, "state": "done"}, "stage": {"id": 1, "state": "holding"}}
    c = Recorder(str(tmp_path / "s.sock"))
    c.health(); c.filesets(); c.rank("a/b", "home", 2, 1, revision="main"); c.pulls(); c.pull(3)  # noqa: E702
    c.submit_pull("a/b", "home", 2, 1, revision="main", endpoint="http://x", pin="p", make_room=True)
    c.jobs(state="done"); c.job(1); c.cancel_job(1); c.wait_job(1)  # noqa: E702
    c.verify("a/b", revision="main"); c.evict("a/b", revision="main"); c.stages(); c.stage(1)  # noqa: E702
    c.start_stage("a/b", "home", 2, 1, revision="main", memory="host", lease="v2", device=0, check="all",
                  release_wait_s=5)
    c.release_stage(1); c.wait_stage(1)  # noqa: E702

    def resolve(x):
        while isinstance(x, dict) and "$ref" in x:
            node = doc
            for part in x["$ref"].lstrip("#/").split("/"):
                node = node[part]
            x = node
        return x
    for method, path, body, query in made:
        template = re.sub(r"/\d+$", "/{id}", path)
        assert template in doc["paths"], path
        item = doc["paths"][template]
        assert method.lower() in item, f"{method} {template}"
        op = item[method.lower()]
        params = [resolve(p) for p in item.get("parameters", []) + op.get("parameters", [])]
        assert set(query or {}) <= {p["name"] for p in params if p["in"] == "query"}, (path, query)
        if body is not None:
            schema = resolve(op["requestBody"]["content"]["application/json"]["schema"])
            assert set(body) <= set(schema["properties"]), (path, set(body) - set(schema["properties"]))
            assert set(schema.get("required", [])) <= set(body), path
def test_stage_routes(serve):
    """POST /v1/stages starts a GPU holder: here, without a GPU, it fails, and
    the client follows it to that state and forgets it."""
    c = exlr8.Client(serve["socket"])
    c.wait_job(c.submit_pull("exlr8/test", "home", 4, 2)["id"], timeout=120)
    try:
        s = c.start_stage("exlr8/test", "home", 4, 2, release_wait_s=5)
    except exlr8.ApiError as e:  # serve has no exlr8d-stage beside it
        assert e.status == 501, e
        pytest.skip(str(e))
    assert s["id"] >= 1 and s["state"] in ("starting", "reading", "staging", "holding", "failed", "died")
    s = c.wait_stage(s["id"], timeout=120)
    assert [x["id"] for x in c.stages()] == [s["id"]]
    if s["state"] == "holding":  # a machine with a GPU: the lease is there
        assert s["lease"]
        assert c.release_stage(s["id"])["stage"]["id"] == s["id"]
        s = c.wait_stage(s["id"], states=("released", "failed", "died"), timeout=120)
    else:
        assert s["state"] in ("failed", "died") and s["error"], s
    assert c.release_stage(s["id"]).get("forgotten") is True
    with pytest.raises(exlr8.ApiError) as e:
        c.stage(s["id"])
    assert e.value.status == 404
