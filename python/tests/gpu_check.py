#!/usr/bin/env python3
"""Checks exlr8.Lease on a device-memory lease, on a GPU machine, with
nothing but python3 and the NVIDIA driver (no torch, no pip):

    python3 python/tests/gpu_check.py SOCKET [--expect-ordinal N] [--stop-holder PID]

SOCKET: the lease socket of a holder started with
    exlr8d-stage --memory device --lease v2 --hold SOCKET ...
It opens the lease (finding the GPU by UUID, importing the allocation
read-only, checking the image's header and offset table copied back),
copies every region back and checks its XXH64 against the tables, checks
each check entry's digest, the lookups and the __cuda_array_interface__
objects, lets go, and checks that the lease is closed. Then, on a holder it
writes itself (tests/fakeholder.py) naming this machine's first GPU with a
bogus legacy IPC handle, that the failed import is a CudaError naming the
call and leaves no descriptor open. With torch installed it also compares
lease.torch() with the copies. Exit 0: all passed; 1: a check failed; 77:
no GPU or no driver here.
"""

import argparse
import json
import os
import pathlib
import struct
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
try:
    import exlr8  # installed
except ImportError:
    sys.path.insert(0, str(HERE.parent / "src"))
    import exlr8
from exlr8 import _cuda

P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                      0x27D4EB2F165667C5)
M = (1 << 64) - 1


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M


def _round(acc, v):
    return (_rotl((acc + v * P2) & M, 31) * P1) & M


def xxh64(data: bytes, seed: int = 0) -> int:
    """XXH64, pure Python (the xxhash package is used instead when present)."""
    try:
        import xxhash
        return xxhash.xxh64_intdigest(data, seed)
    except ImportError:
        pass
    n = len(data)
    i = 0
    if n >= 32:
        v1, v2, v3, v4 = (seed + P1 + P2) & M, (seed + P2) & M, seed, (seed - P1) & M
        stripes = n // 32
        for a, b, c, d in struct.iter_unpack("<4Q", data[:stripes * 32]):
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
        i = stripes * 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & M
        for v in (v1, v2, v3, v4):
            h = ((h ^ _round(0, v)) * P1 + P4) & M
    else:
        h = (seed + P5) & M
    h = (h + n) & M
    while i + 8 <= n:
        (k,) = struct.unpack_from("<Q", data, i)
        h = (_rotl(h ^ _round(0, k), 27) * P1 + P4) & M
        i += 8
    if i + 4 <= n:
        (k,) = struct.unpack_from("<I", data, i)
        h = (_rotl(h ^ (k * P1 & M), 23) * P2 + P3) & M
        i += 4
    while i < n:
        h = (_rotl(h ^ (data[i] * P5 & M), 11) * P1) & M
        i += 1
    h ^= h >> 33
    h = h * P2 & M
    h ^= h >> 29
    h = h * P3 & M
    return h ^ (h >> 32)


failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def memfd_fds():
    out = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            out += "memfd:" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return out


def image_bytes(lease, off, n):
    if lease.memory_kind == "device":
        return lease._state["device"].copy_to_host(off, n)
    return bytes(lease.image_buffer()[off:off + n])


def check_lease(sock, expect_ordinal, stop_holder, host_ok=False):
    t0 = time.monotonic()
    lease = exlr8.Lease(sock)
    check(lease.memory_kind == "device" or host_ok, f"opened {lease} in {time.monotonic() - t0:.2f} s")
    d = lease.description
    if lease.memory_kind == "host":  # a dry run of the checks below on a host lease (--host-ok)
        d = type("D", (), {"device": type("G", (), {"uuid": "-", "pci_bus_id": "-", "ordinal_in_holder": -1}),
                           "image": lease.description.image})
    print(f"     GPU {d.device.uuid} ({d.device.pci_bus_id}), holder's ordinal {d.device.ordinal_in_holder}, "
          f"this process's {lease.device}; CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}")
    if lease.memory_kind == "device":
        seen = {u.lower(): o for o, u, _ in _cuda.devices()}
        check(seen.get(d.device.uuid.lower()) == lease.device, "the device was found by its UUID")
    if expect_ordinal is not None:
        check(lease.device == expect_ordinal, f"the ordinal is {expect_ordinal}")
    check(lease.proof["hashed"]["mismatches"] == 0, f"proof: {json.dumps(lease.proof['hashed'])}")
    # Every region copied back equals its digest.
    bad = [t.what() for t in lease.tensors if xxh64(lease.read(t)) != t.xxh64]
    check(not bad, f"{len(lease.tensors)} regions at their XXH64 (first bad: {bad[:3]})")
    image = {}
    bad = 0
    for c in lease.checks:
        data = b""
        for off, n in c.segments:
            key = (off, n)
            if key not in image:
                image[key] = image_bytes(lease, off, n)
            data += image[key]
        bad += xxh64(data) != c.digest
    check(bad == 0, f"{len(lease.checks)} check entries at their digest ({bad} bad)")
    halves = [t for t in lease.tensors if t.kind == "half"]
    check(all(lease.half(t.layer, t.expert, t.proj, t.half) is t for t in halves), f"{len(halves)} halves found")
    named = [t for t in lease.tensors if t.name]
    check(all(lease.tensor(t.name) is t for t in named), f"{len(named)} names found")
    # The pointer table in device memory equals the tables' copy.
    im = d.image
    table = image_bytes(lease, im.offset_table, im.offset_table_bytes)
    check(table == lease.offset_table.tobytes(), "the pointer table in the image equals the tables'")
    if lease.memory_kind == "device":
        check_device_arrays(lease, d, halves, named)
    release_and_close(lease, lease.description, stop_holder)


def check_device_arrays(lease, d, halves, named):
    im = d.image
    a = lease.cuda_array(halves[0] if halves else lease.tensors[0])
    cai = a.__cuda_array_interface__
    check(cai["version"] == 3 and cai["data"][1] is True and cai["data"][0] == lease.device_pointer
          + (halves[0] if halves else lease.tensors[0]).offset, f"__cuda_array_interface__ {cai}")
    ot = lease.offset_table_cuda_array().__cuda_array_interface__
    check(ot["shape"] == (im.offset_table_bytes // 8,) and ot["typestr"] == "<u8",
          "the pointer table as a device array")
    try:
        import torch
    except ImportError:
        torch = None
        print("     (no torch: lease.torch() not checked)")
    if torch is not None:
        x = None
        for t in (halves[:3] + named[:3]):
            x = lease.torch(t)
            same = bytes(x.contiguous().view(torch.uint8).cpu().numpy().tobytes()) == lease.read(t)
            check(x.device.index == lease.device and same, f"lease.torch({t.what()}) on cuda:{x.device.index}")
        tab = lease.offset_table_torch()
        check(tab.cpu().numpy().tobytes() == lease.offset_table.tobytes(), "offset_table_torch()")
        del x, tab
        torch.cuda.synchronize()


def release_and_close(lease, d, stop_holder):
    if stop_holder:
        import signal
        check(lease.poll_release() is None, "no release line before the holder is told to stop")
        os.kill(stop_holder, signal.SIGTERM)
        r = lease.wait_release(60)
        check(r is not None and not r.holder_gone and r.deadline_s == d.release_deadline_s,
              f"the release line after SIGTERM to {stop_holder}: {r}")
    lease.close()
    lease.close()
    check(lease.closed and lease._state["device"] is None, "closed (import released, then the socket)")


def check_failed_import():
    import fakeholder
    import imagewriter
    b = imagewriter.Builder(1, 1, 1, commit="feed")
    b.add_half(0, 0, 0, 0, k=1, hidden=8)
    served = fakeholder.Served(b)
    ordinal, uuid, bus = _cuda.devices()[0]
    d = dict(served.description)
    d["memory"] = {"kind": "device", "device": {"uuid": uuid, "pci_bus_id": bus, "ordinal_in_holder": 0},
                   "allocations": [{"bytes": b.allocation, "handle": "ipc:" + "00" * 64}]}
    with tempfile.TemporaryDirectory() as tmp:
        before = memfd_fds()
        h = fakeholder.FakeHolder(os.path.join(tmp, "h.sock"), json.dumps(d).encode(), [served.tables_fd])
        try:
            exlr8.Lease(h.path)
            check(False, "a bogus IPC handle was refused")
        except exlr8.CudaError as e:
            check(e.call == "cuIpcOpenMemHandle", f"a bogus IPC handle: {e}")
        check(h.eof.wait(5), "the connection was closed after the failed import")
        check(memfd_fds() == before, "no descriptor left open")
        h.close()
    served.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("socket")
    ap.add_argument("--expect-ordinal", type=int)
    ap.add_argument("--stop-holder", type=int, metavar="PID",
                    help="after the checks, SIGTERM the holder and wait for its release line before letting go")
    ap.add_argument("--host-ok", action="store_true", help=argparse.SUPPRESS)  # a dry run on a host lease
    args = ap.parse_args()
    if args.host_ok:
        check_lease(args.socket, None, args.stop_holder, host_ok=True)
        return 0 if not failures else 1
    try:
        devs = _cuda.devices()
    except exlr8.LeaseError as e:
        print(f"SKIP: {e}")
        return 77
    if not devs:
        print("SKIP: no CUDA device visible")
        return 77
    for o, u, b in devs:
        print(f"     device {o}: {u} ({b})")
    check_lease(args.socket, args.expect_ordinal, args.stop_holder)
    check_failed_import()
    print("PASSED" if not failures else f"FAILED: {len(failures)} check(s)")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
