"""huggingface_hub against exlr8-hubsim: the real client must work unchanged.

Run by scripts/hf_compat_test.sh with HF_ENDPOINT pointing at the simulator's
hub, HF_TOKEN set to the simulator's token and HF_HOME in a scratch dir.
Usage: hf_compat_test.py REPO_ID FIXTURE_DIR
Exits non-zero (with a message naming the check) on any mismatch.
"""

import hashlib
import json
import os
import struct
import sys
import urllib.request

import huggingface_hub
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.utils import RepositoryNotFoundError

SMALL = "config.json"
LFS = "experts/exlr8-layer-003.k2.safetensors"
LFS_RESUMED = "experts/exlr8-layer-004.k3.safetensors"
HEADER_FILE = "dense/exlr8-dense-000.safetensors"

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def control(endpoint, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(endpoint + path, data=data, method="POST" if data is not None else "GET")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def local_files(root):
    out = set()
    for d, _, names in os.walk(root):
        for n in names:
            out.add(os.path.relpath(os.path.join(d, n), root).replace(os.sep, "/"))
    return out


def main():
    repo, fixture = sys.argv[1], sys.argv[2]
    endpoint = os.environ["HF_ENDPOINT"]
    print(f"huggingface_hub {huggingface_hub.__version__} against {endpoint}", flush=True)
    api = HfApi(endpoint=endpoint)

    def read(rel):
        with open(os.path.join(fixture, rel), "rb") as f:
            return f.read()

    # hf_hub_download: a regular file (served by the hub) and an LFS file (302 -> CDN).
    for rel in (SMALL, LFS):
        path = hf_hub_download(repo, rel)
        with open(path, "rb") as f:
            check(f.read() == read(rel), f"hf_hub_download {rel}: bytes equal the fixture")

    # A dropped CDN connection: the client resumes with a Range request.
    control(endpoint, "/_sim/faults", {"drop": 1.0, "max_faults": 1, "hosts": "cdn"})
    path = hf_hub_download(repo, LFS_RESUMED)
    with open(path, "rb") as f:
        check(f.read() == read(LFS_RESUMED), f"hf_hub_download {LFS_RESUMED} after a dropped connection")
    stats = control(endpoint, "/_sim/stats")
    check(stats["faults"]["drop"] == 1, "the drop fault was injected once")
    control(endpoint, "/_sim/faults", {})

    # Ranged safetensors header read (what get_safetensors_metadata does per file).
    meta = api.parse_safetensors_file_metadata(repo, HEADER_FILE)
    raw = read(HEADER_FILE)
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    expected = {k for k in header if k != "__metadata__"}
    check(set(meta.tensors) == expected, f"parse_safetensors_file_metadata {HEADER_FILE}: {len(expected)} tensors")
    try:
        api.get_safetensors_metadata(repo)
        check(False, "get_safetensors_metadata raises NotASafetensorsRepoError (no model.safetensors)")
    except huggingface_hub.utils.NotASafetensorsRepoError:
        check(True, "get_safetensors_metadata: repo without model.safetensors is reported as such")

    # Listings (the simulator pages every few entries, so this follows Link headers).
    files = api.list_repo_files(repo)
    check(set(files) == local_files(fixture), f"list_repo_files: {len(files)} files")
    tree = {e.path: e for e in api.list_repo_tree(repo, recursive=True)}
    lfs_entry = tree.get(LFS)
    check(
        lfs_entry is not None and lfs_entry.lfs is not None
        and lfs_entry.lfs.sha256 == hashlib.sha256(read(LFS)).hexdigest(),
        "list_repo_tree: LFS entry carries the sha256",
    )
    check(
        {"dense", "experts", "manifests"} <= set(tree), "list_repo_tree recursive lists the directories"
    )
    sub = [e.path for e in api.list_repo_tree(repo, path_in_repo="experts")]
    check(len(sub) == 8 and all(p.startswith("experts/") for p in sub), "list_repo_tree path_in_repo=experts")
    info = api.model_info(repo, files_metadata=True)
    sizes = {s.rfilename: s.size for s in info.siblings}
    check(sizes.get(LFS) == len(read(LFS)), "model_info(files_metadata=True): sibling sizes")

    # Without the token the repo is invisible; with it the token never reaches the CDN.
    try:
        api.model_info(repo, token=False)
        check(False, "model_info without token raises RepositoryNotFoundError")
    except RepositoryNotFoundError:
        check(True, "model_info without token raises RepositoryNotFoundError")
    stats = control(endpoint, "/_sim/stats")
    check(stats["cdn"]["requests"] >= 2, f"CDN served {stats['cdn']['requests']} requests")
    check(stats["cdn"]["with_authorization"] == 0, "no request to the CDN carried Authorization")
    check(stats["hub"]["with_authorization"] > 0, "hub requests carried Authorization")

    if failures:
        print(f"{len(failures)} check(s) failed", flush=True)
        return 1
    print("all huggingface_hub compatibility checks passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
