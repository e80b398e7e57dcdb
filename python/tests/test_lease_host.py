"""exlr8.Lease on a real holder: exlr8d-stage --memory host --hold over a
cache pulled from the shared fixture by exlr8d pull through exlr8-hubsim."""

import gc
import os
import signal
import threading

import pytest

import exlr8
import exlr8.lease

xxhash = pytest.importorskip("xxhash", reason="the xxhash package (pip install xxhash) checks the bytes")


def memfd_maps():
    with open("/proc/self/maps") as f:
        return [line for line in f if "memfd:" in line]


def test_every_region_and_check_matches_its_digest(start_holder):
    holder, sock = start_holder()
    with exlr8.Lease(sock) as lease:
        assert lease.memory_kind == "host"
        assert (lease.tp, lease.rank, lease.repo, lease.manifest) == (3, 1, "exlr8/test", "home")
        assert len(lease.commit) == 40 and lease.proof["commit"] == lease.commit
        assert lease.proof["hashed"]["mismatches"] == 0
        assert lease.proof["hashed"]["regions"] == len(lease.checks)
        assert lease.allocations[0].handle == "fd" and lease.allocations[0].bytes == lease.description.image.bytes
        assert lease.gpu_uuid is None
        kinds = set()
        assert len(lease.tensors) == lease.description.tables.tensors > 0
        for t in lease.tensors:
            kinds.add(t.kind)
            assert xxhash.xxh64_intdigest(lease.buffer(t)) == t.xxh64, t.what()
        assert {"half", "signs.in", "signs.out"} <= kinds and kinds & {"dense", "plain"}
        image = lease.image_buffer()
        for c in lease.checks:
            h = xxhash.xxh64()
            for off, n in c.segments:
                h.update(image[off:off + n])
            assert h.intdigest() == c.digest
        del image


def test_lookups_find_every_half_and_name_and_nothing_else(start_holder):
    _, sock = start_holder()
    with exlr8.Lease(sock) as lease:
        halves = [t for t in lease.tensors if t.kind == "half"]
        assert halves
        for t in halves:
            assert lease.half(t.layer, t.expert, t.proj, t.half) is t
            assert lease.half(t.layer, -1 if t.expert == "shared" else t.expert, ("gate", "up", "down").index(t.proj),
                              t.half) is t
        owned = {(t.layer, t.expert, t.proj, t.half) for t in halves}
        im = lease.description.image
        for layer in range(im.layers):
            for e in list(range(im.experts)) + ["shared"]:
                for p in ("gate", "up", "down"):
                    for h in range(im.halves):
                        found = lease.half(layer, e, p, h)
                        assert (found is not None) == ((layer, e, p, h) in owned)
        assert lease.half(im.layers, 0, "gate", 0) is None
        assert lease.half(0, im.experts, "gate", 0) is None
        assert lease.half(0, 0, "nope", 0) is None
        assert lease.half(0, 0, "gate", im.halves) is None
        named = [t for t in lease.tensors if t.name is not None]
        assert lease.names() == [t.name for t in named]
        assert named and all(lease.tensor(t.name) is t for t in named)
        assert lease.tensor("no such tensor") is None
        signs = [t for t in lease.tensors if t.kind.startswith("signs")]
        assert all(lease.signs(t.layer, t.kind == "signs.out") is t for t in signs)
        # The pointer table: the tables' copy, the image's own, each half's offset.
        table = lease.offset_table
        assert list(lease.offset_table_buffer()) == list(table)
        for t in halves:
            assert table[lease.tables.offset_index(t.layer, t.expert, t.proj, t.half)] == t.offset
        assert table.count(exlr8.ABSENT) == len(table) - len(halves)


def test_buffers_are_read_only_views_and_numpy_is_zero_copy(start_holder):
    _, sock = start_holder()
    with exlr8.Lease(sock) as lease:
        t = next(t for t in lease.tensors if t.kind == "plain" or t.kind == "dense")
        b = lease.buffer(t)
        assert b.readonly and len(b) == t.length
        with pytest.raises(TypeError):
            b[0] = 1
        b.release()
        np = pytest.importorskip("numpy")
        f = next(t for t in lease.tensors if t.dtype in ("F32", "F16") and t.kind != "half")
        a = lease.numpy(f)
        assert a.shape == f.shape and not a.flags.writeable
        assert a.tobytes() == bytes(lease.buffer(f))
        raw = np.frombuffer(lease.buffer(f), np.uint8)
        assert a.__array_interface__["data"][0] == raw.__array_interface__["data"][0]  # the same memory
        del raw
        del a
        h = lease.numpy(next(t for t in lease.tensors if t.kind == "half"))
        assert h.dtype == np.uint8
        del h


def test_the_release_line_comes_and_close_unmaps_before_the_socket_closes(start_holder, monkeypatch):
    holder, sock = start_holder(release_wait=20)
    before = memfd_maps()
    lease = exlr8.Lease(sock)
    image = [m for m in memfd_maps() if m not in before]
    assert image, "the image is mapped"
    assert lease.poll_release() is None and not lease.release_requested
    holder.proc.send_signal(signal.SIGTERM)
    r = lease.wait_release(20)
    assert r is not None and r.deadline_s == 20 and not r.holder_gone
    assert lease.release_requested
    assert holder.read_until("waiting up to"), holder.printed
    seen = {}
    real_close = exlr8.lease._Connection.close

    def spy(conn):
        seen.setdefault("maps at socket close", [m for m in memfd_maps() if m in image])
        real_close(conn)
    monkeypatch.setattr(exlr8.lease._Connection, "close", spy)
    lease.close()
    assert seen["maps at socket close"] == [], "the socket closed before the image was unmapped"
    lease.close()  # twice: nothing more
    assert lease.closed
    assert holder.read_until("released after 1 lease(s)"), holder.printed
    assert holder.stop() == 0, holder.printed


def test_close_while_a_buffer_is_alive_lets_go_when_it_goes(start_holder):
    holder, sock = start_holder(release_wait=20)
    lease = exlr8.Lease(sock)
    b = lease.buffer(lease.tensors[0])
    with pytest.warns(ResourceWarning):
        lease.close()
    first = bytes(b[:16])  # still mapped: readable
    holder.proc.send_signal(signal.SIGTERM)
    assert holder.read_until("waiting up to"), holder.printed
    assert not holder.read_until("released after", timeout=0.5), "the holder saw this lessee go too early"
    del b
    gc.collect()
    assert holder.read_until("released after 1 lease(s)"), holder.printed
    assert first


def test_on_release_callback_and_exit_on_an_exception(start_holder):
    holder, sock = start_holder(release_wait=20)
    got = threading.Event()
    calls = []

    def on_release(lease, release):
        calls.append(release)
        lease.close()  # from the watcher thread
        got.set()

    with pytest.raises(RuntimeError):
        with exlr8.Lease(sock) as lease:
            other = exlr8.Lease(sock, on_release=on_release)
            raise RuntimeError("serving failed")
    assert lease.closed
    holder.proc.send_signal(signal.SIGTERM)
    assert got.wait(20)
    assert calls[0].deadline_s == 20 and other.closed
    assert holder.read_until("released after"), holder.printed


def test_interpreter_exit_lets_go(start_holder, tmp_path):
    import subprocess
    import sys
    holder, sock = start_holder(release_wait=20)
    code = ("import exlr8, sys\n"
            f"lease = exlr8.Lease({sock!r})\n"
            "b = lease.buffer(lease.tensors[0])\n"
            "print('opened', len(lease.tensors), flush=True)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-W", "error::ResourceWarning", "-c", code], capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode == 0 and "opened" in r.stdout, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    holder.proc.send_signal(signal.SIGTERM)
    assert holder.read_until("released after"), holder.printed
    assert "still" not in holder.printed.split("released after")[0].split("waiting up to")[-1], holder.printed


def test_half_weights_without_the_library_names_where_it_looked(start_holder, monkeypatch, tmp_path):
    import exlr8._native
    holder, sock = start_holder()
    missing = str(tmp_path / "libexlr8client.so.0")
    monkeypatch.setenv("EXLR8CLIENT_LIBRARY", missing)
    monkeypatch.setattr(exlr8._native, "_lib", None)
    with exlr8.Lease(sock) as lease:
        t = next(t for t in lease.tensors if t.kind == "half")
        with pytest.raises(exlr8.LeaseUnavailableError, match="cannot load " + missing):
            lease.half_weights(t)
        signs = lease.signs(t.layer)
        with pytest.raises(ValueError, match="is not a half record"):
            lease.half_weights(signs)
