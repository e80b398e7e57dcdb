"""exlr8.Lease on a holder of a whole LVQ5 fileset: the lvq5-tiny fixture
pulled by exlr8d pull through exlr8-hubsim, staged by exlr8d-stage --memory
host --hold without --manifest; every tensor found by name with its format
and digest, the Tetra codes in the served layout of spec 2.7."""

import json
import os
import pathlib
import signal
import struct
import subprocess
import time

import pytest

import exlr8
from conftest import Process, binary

xxhash = pytest.importorskip("xxhash", reason="the xxhash package (pip install xxhash) checks the bytes")

REPO = pathlib.Path(__file__).resolve().parents[2]


def _fixture() -> pathlib.Path:
    return pathlib.Path(os.environ.get("EXLR8_LVQ5_FIXTURE", REPO.parent / "shared" / "fixtures" / "lvq5-tiny"))


@pytest.fixture(scope="module")
def lvq5_cache(tmp_path_factory):
    fixture = _fixture()
    if not (fixture / "tiny-sealed.bin").is_file():
        pytest.skip(f"the LVQ5 fixture {fixture} is missing (set EXLR8_LVQ5_FIXTURE)")
    work = tmp_path_factory.mktemp("lvq5")
    port_file = work / "ports"
    hub = Process([binary("exlr8-hubsim"), "--repo", f"lvq5/tiny={fixture}", "--port-file", str(port_file)],
                  work / "hubsim.log")
    end = time.monotonic() + 30
    while not (port_file.exists() and port_file.read_text().strip()):
        assert hub.proc.poll() is None and time.monotonic() < end, "exlr8-hubsim did not start"
        time.sleep(0.05)
    fields = dict(kv.split("=", 1) for kv in port_file.read_text().split())
    cache = work / "cache"
    r = subprocess.run([binary("exlr8d"), "pull", "--repo", "lvq5/tiny", "--endpoint", fields["hub"], "--cache",
                        str(cache), "--no-progress"], capture_output=True, text=True, timeout=300)
    hub.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    return cache


def served(disk: bytes, nblocks: int) -> bytes:
    """Spec 2.7 from 1.4: big-endian V = label << 1 | gain -> little-endian
    W = label | gain << 47, rows padded to 8 bytes."""
    row, stride, out = 6 * nblocks, (6 * nblocks + 7) // 8 * 8, bytearray()
    for r in range(len(disk) // row):
        for j in range(nblocks):
            v = int.from_bytes(disk[r * row + 6 * j:r * row + 6 * j + 6], "big")
            out += ((v >> 1) | (v & 1) << 47).to_bytes(6, "little")
        out += bytes(stride - row)
    return bytes(out)


def test_every_record_is_found_by_name_with_its_format_and_bytes(lvq5_cache, tmp_path):
    sock = tmp_path / "lease.sock"
    p = Process([binary("exlr8d-stage"), "--cache", str(lvq5_cache), "--repo", "lvq5/tiny", "--memory", "host",
                 "--hold", str(sock)], tmp_path / "stage.log")
    try:
        assert p.read_until("holding:"), p.printed
        with exlr8.Lease(str(sock)) as lease:
            assert lease.memory_kind == "host"
            assert (lease.tp, lease.rank, lease.manifest) == (1, 0, "lvq5-whole-fileset")
            assert lease.proof["hashed"]["mismatches"] == 0
            assert lease.tensors and all(t.kind == "plain" for t in lease.tensors)
            formats = set()
            for t in lease.tensors:
                assert lease.tensor(t.name) is t
                assert xxhash.xxh64_intdigest(lease.buffer(t)) == t.xxh64, t.name
                formats.add(t.format.split("G")[0] if t.format.startswith("Q") else t.format)
            assert "TETRA48" in formats
            # A Tetra record's codes: the file's disk words in the served
            # layout; its row scales one f64 per row.
            codes = [t for t in lease.tensors if t.format == "TETRA48" and t.dtype == "U8"]
            assert codes
            data = (_fixture() / "tiny-sealed.bin").read_bytes()
            for t in codes:
                scales = lease.tensor(t.name + ".row_scales")
                assert scales is not None and scales.dtype == "F64" and scales.shape == (t.out,)
                nblocks = t.inp // 24
                assert t.shape == (t.out, (6 * nblocks + 7) // 8 * 8)
                got = lease.read(t)
                # The served bytes name the disk stream: map them back and
                # find that stream in the file.
                disk = bytearray()
                for r in range(t.out):
                    for j in range(nblocks):
                        w = int.from_bytes(got[r * t.shape[1] + 6 * j:r * t.shape[1] + 6 * j + 6], "little")
                        disk += (((w & ((1 << 47) - 1)) << 1) | (w >> 47)).to_bytes(6, "big")
                at = data.find(bytes(disk))
                assert at >= 0, t.name
                assert served(bytes(disk), nblocks) == got
    finally:
        p.stop(signal.SIGTERM)
