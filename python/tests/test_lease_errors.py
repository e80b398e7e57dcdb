"""exlr8.Lease against a holder written in the test (fakeholder.py): what a
real holder never sends, each refused with a named error and every
descriptor closed."""

import json
import os
import socket
import threading

import pytest

import exlr8
import exlr8.lease
import fakeholder
import imagewriter


def small_builder():
    b = imagewriter.Builder(layers=2, experts=3, halves=2, tp=2, rank=1, commit="0123abcd")
    for layer in range(2):
        for e in (1, "shared"):
            for p in range(3):
                for h in range(2):
                    b.add_half(layer, e, p, h, k=1 + (layer + p) % 3, hidden=8)
        b.add_signs(layer, False)
        b.add_signs(layer, True)
    b.add_plain("embed", (16, 4), dtype=imagewriter.F16)
    b.add_plain("layers.0.norm", (8,), layer=0)
    b.add_plain("layers.1.q", (4, 8), dtype=imagewriter.BF16, layer=1, dense_format=6, out=4, inp=8)
    return b


def fill(i, n):
    return bytes((i * 7 + j) % 251 for j in range(n))


@pytest.fixture
def served():
    s = fakeholder.Served(small_builder(), fill)
    yield s
    s.close()


@pytest.fixture
def holders(tmp_path):
    made = []

    def make(line, fds=(), **kw):
        h = fakeholder.FakeHolder(tmp_path / f"h{len(made)}.sock", line, fds, **kw)
        made.append(h)
        return h
    yield make
    for h in made:
        h.close()


def open_fds():
    """This process's descriptors of memfds (the served ones and any received)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "memfd:" in os.readlink(f"/proc/self/fd/{fd}"):
                out.append(fd)
        except OSError:
            pass
    return sorted(out)


def test_a_good_image_opens(served, holders):
    h = holders(served.line(), [served.image_fd, served.tables_fd])
    with exlr8.Lease(h.path) as lease:
        assert len(lease.tensors) == len(served.builder.entries)
        for i, t in enumerate(lease.tensors):
            assert bytes(lease.buffer(t)) == fill(i, t.length)
        q = lease.tensor("layers.1.q")
        assert (q.kind, q.format, q.dtype, q.shape, q.layer, q.out, q.inp) == ("dense", "BF16", "BF16", (4, 8), 1, 4, 8)
        t = lease.half(1, "shared", "down", 1)
        assert (t.layer, t.expert, t.proj, t.half, t.k) == (1, "shared", "down", 1, 1 + (1 + 2) % 3)
        assert lease.half(1, 0, "down", 1) is None  # expert 0: another rank's
        parts = lease.half_parts(t)
        assert [p.length for p in parts] == [16 * t.k * 8, 128 * 2, 4] and sum(p.length for p in parts) == t.length
    assert h.eof.wait(5)


def test_no_socket_is_not_found(tmp_path):
    with pytest.raises(exlr8.LeaseNotFoundError, match="no.sock"):
        exlr8.Lease(tmp_path / "no.sock")


def test_a_socket_nobody_listens_on_is_unavailable(tmp_path):
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(tmp_path / "dead.sock"))
    s.close()
    with pytest.raises(exlr8.LeaseUnavailableError):
        exlr8.Lease(tmp_path / "dead.sock")


def test_garbage_json_is_a_description_error_and_closes_the_descriptors(served, holders):
    before = open_fds()
    h = holders(b'{"version":2, this is not json', [served.image_fd, served.tables_fd])
    with pytest.raises(exlr8.DescriptionError, match="not JSON"):
        exlr8.Lease(h.path)
    assert open_fds() == before
    assert h.eof.wait(5)


def test_a_v1_holder_is_named(holders):
    h = holders(b'{"version":1,"repo":"x"}', newline=False, close_after=True)
    with pytest.raises(exlr8.LeaseVersionError, match="protocol v1"):
        exlr8.Lease(h.path)


def test_a_holder_that_closes_at_once_is_unavailable(holders):
    h = holders(b"", newline=False, close_after=True)
    with pytest.raises(exlr8.LeaseUnavailableError, match="without a description"):
        exlr8.Lease(h.path)


def test_end_of_stream_inside_the_line_is_corruption(holders):
    h = holders(b'{"version":2,"repo"', newline=False, close_after=True)
    with pytest.raises(exlr8.LeaseCorruptionError, match="before the description's end of line"):
        exlr8.Lease(h.path)


def test_a_silent_holder_times_out(holders):
    h = holders(b'{"version":2', newline=False)
    with pytest.raises(exlr8.LeaseUnavailableError, match="within"):
        exlr8.Lease(h.path, timeout=0.3)


def test_a_line_too_long_is_refused(holders):
    h = holders(b'{"version":2,"repo":"' + b"x" * 70000, newline=False)
    with pytest.raises(exlr8.LeaseCorruptionError, match="longer than 65536"):
        exlr8.Lease(h.path)


def test_descriptor_count_must_be_the_described_one(served, holders):
    before = open_fds()
    h = holders(served.line(), [served.image_fd])
    with pytest.raises(exlr8.LeaseCorruptionError, match="names 2 file descriptors .* but 1 came"):
        exlr8.Lease(h.path)
    h2 = holders(served.line(), [served.image_fd, served.tables_fd, served.tables_fd])
    with pytest.raises(exlr8.LeaseCorruptionError, match="but 3 came"):
        exlr8.Lease(h2.path)
    assert open_fds() == before


def test_descriptors_after_the_first_byte_are_refused(served, holders):
    before = open_fds()
    h = holders(served.line(), [served.image_fd, served.tables_fd], split_fds=True)
    with pytest.raises(exlr8.LeaseCorruptionError, match="after its first byte"):
        exlr8.Lease(h.path)
    assert open_fds() == before


def test_an_unsealed_or_short_memfd_is_refused(served, holders):
    loose = fakeholder.memfd(served.tables, seal=False)
    h = holders(served.line(), [served.image_fd, loose])
    with pytest.raises(exlr8.LeaseCorruptionError, match=r"tables.bytes .* not sealed"):
        exlr8.Lease(h.path)
    short = fakeholder.memfd(served.tables[:-8])
    h2 = holders(served.line(), [served.image_fd, short])
    with pytest.raises(exlr8.LeaseCorruptionError, match=f"has {len(served.tables) - 8} bytes"):
        exlr8.Lease(h2.path)
    os.close(loose)
    os.close(short)


def test_truncated_tables_are_refused_naming_the_header_field(served, holders):
    # A described size that matches a truncated file: the parser finds the sections past its end.
    cut = served.tables[:-16]
    fd = fakeholder.memfd(cut)
    d = dict(served.description)
    h = holders(json.dumps(d).encode(), [served.image_fd, fd])
    with pytest.raises(exlr8.LeaseCorruptionError):
        exlr8.Lease(h.path)  # tables.bytes disagrees with the file
    with pytest.raises(exlr8.TablesError) as e:
        exlr8.parse_tables(cut, served.builder.allocation)
    assert (e.value.table, e.value.field, e.value.byte) == ("image tables header", "offset_table_bytes", 96)
    os.close(fd)


def test_an_image_header_that_disagrees_is_refused(served, holders):
    d = dict(served.description)
    d["commit"] = "ffffffff"
    d["proof"] = dict(d["proof"], commit="ffffffff")
    h = holders(json.dumps(d).encode(), [served.image_fd, served.tables_fd])
    with pytest.raises(exlr8.TablesError, match="commit 'ffffffff' vs header '0123abcd'"):
        exlr8.Lease(h.path)


def test_an_image_offset_table_that_differs_is_refused(served, holders):
    img = bytearray(served.image)
    at = served.builder.sections[3][0] + 8 * 5
    img[at:at + 8] = (12345).to_bytes(8, "little")
    fd = fakeholder.memfd(bytes(img))
    h = holders(served.line(), [fd, served.tables_fd])
    with pytest.raises(exlr8.TablesError, match=f"offset table entry 5 at byte {at}") as e:
        exlr8.Lease(h.path)
    assert e.value.entry == 5 and e.value.byte == at
    os.close(fd)


def test_release_line_holder_gone_and_bad_lines(served, holders):
    h = holders(served.line(), [served.image_fd, served.tables_fd])
    with exlr8.Lease(h.path) as lease:
        assert lease.poll_release() is None
        h.send(b'{"type":"release","deadline_s":0}\n')
        r = lease.wait_release(5)
        assert (r.deadline_s, r.holder_gone) == (0, False)
    h2 = holders(served.line(), [served.image_fd, served.tables_fd], close_after=True)
    with exlr8.Lease(h2.path) as lease:
        r = lease.wait_release(5)
        assert r.holder_gone
        assert lease.buffer(lease.tensors[0])[:4] == fill(0, 4)  # the mapping outlives the holder
    for bad in (b'{"type":"release","deadline_s":01}\n', b'{"type":"release", "deadline_s":1}\n',
                b'{"type":"release","deadline_s":3601}\n', b'{"type":"stop"}\n', b"x" * 300):
        hb = holders(served.line(), [served.image_fd, served.tables_fd])
        with exlr8.Lease(hb.path) as lease:
            hb.send(bad)
            with pytest.raises(exlr8.LeaseCorruptionError, match="holder line|longer than 256"):
                lease.wait_release(5)


def test_close_before_the_holder_counts_the_lessee_gone(served, holders):
    def mapped_now():
        with open("/proc/self/maps") as f:
            return f.read().count("memfd:exlr8-test")
    maps_at_eof = []
    h = holders(served.line(), [served.image_fd, served.tables_fd], on_eof=lambda: maps_at_eof.append(mapped_now()))
    lease = exlr8.Lease(h.path)
    mapped = mapped_now()
    assert mapped >= 1
    lease.close()
    assert h.eof.wait(5)
    assert maps_at_eof[0] == mapped - 1  # the image was unmapped before the socket closed


def test_on_release_runs_once(served, holders):
    h = holders(served.line(), [served.image_fd, served.tables_fd])
    got = []
    done = threading.Event()
    with exlr8.Lease(h.path, on_release=lambda lease, r: (got.append(r), done.set())):
        h.send(b'{"type":"release","deadline_s":9}\n')
        assert done.wait(5)
    assert [r.deadline_s for r in got] == [9]


def test_device_memory_without_a_gpu_is_unavailable_or_not_found(served, holders):
    d = dict(served.description)
    d["memory"] = {"kind": "device", "device": {"uuid": "GPU-01234567-89ab-cdef-0123-456789abcdef",
                                                "pci_bus_id": "0000:4E:00.0", "ordinal_in_holder": 0},
                   "allocations": [{"bytes": served.builder.allocation, "handle": "ipc:" + "ab" * 64}]}
    before = open_fds()
    h = holders(json.dumps(d).encode(), [served.tables_fd])
    with pytest.raises((exlr8.LeaseUnavailableError, exlr8.LeaseNotFoundError), match="GPU|CUDA|libcuda"):
        exlr8.Lease(h.path)
    assert open_fds() == before


def test_a_bad_check_entry_is_refused_when_read_or_at_opening_if_asked(served, holders):
    b = served.builder
    checks_at = 128 + 64 * len(b.entries)
    bad = bytearray(served.tables)
    seg_len = int.from_bytes(bad[checks_at + 80 * 4 + 24:checks_at + 80 * 4 + 32], "little")
    bad[checks_at + 80 * 4 + 24:checks_at + 80 * 4 + 32] = (seg_len + 1).to_bytes(8, "little")
    fd = fakeholder.memfd(bytes(bad))
    h = holders(served.line(), [served.image_fd, fd])
    with exlr8.Lease(h.path) as lease:  # the opening does not read the check entries
        assert lease.half(0, 1, "gate", 0) is not None
        with pytest.raises(exlr8.TablesError) as e:
            lease.checks
        assert (e.value.table, e.value.entry, e.value.field) == ("checks", 4, "segment 0")
    h2 = holders(served.line(), [served.image_fd, fd])
    with pytest.raises(exlr8.TablesError, match=r"checks\[4\] 'segment 0'"):
        exlr8.Lease(h2.path, verify_checks=True)
    os.close(fd)


def test_bad_tables_are_a_tables_error_from_the_opening(served, holders):
    before = open_fds()
    bad = bytearray(served.tables)
    bad[128 + 64 * 3 + 30] = 9  # tensors[3] 'kind'
    fd = fakeholder.memfd(bytes(bad))
    h = holders(served.line(), [served.image_fd, fd])
    with pytest.raises(exlr8.TablesError) as e:
        exlr8.Lease(h.path)
    assert (e.value.table, e.value.entry, e.value.field, e.value.byte) == ("tensors", 3, "kind", 128 + 64 * 3 + 30)
    assert e.value.__context__ is None or not isinstance(e.value.__context__, BufferError)
    os.close(fd)
    assert open_fds() == before


def test_pin_registers_read_only_and_unregisters_before_unmapping(served, holders, monkeypatch):
    """pin=True through torch's cudart (a stand-in here: no torch, no GPU)."""
    import sys
    import types

    def mapped_now():
        with open("/proc/self/maps") as f:
            return f.read().count("memfd:exlr8-test")
    log = []

    class CudaRt:
        def __init__(self, result=0):
            self.result = result

        def cudaHostRegister(self, ptr, size, flags):
            log.append(("register", ptr, size, flags, mapped_now()))
            return self.result

        def cudaHostUnregister(self, ptr):
            log.append(("unregister", ptr, mapped_now()))
            return 0
    rt = CudaRt()
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=types.SimpleNamespace(cudart=lambda: rt)))
    h = holders(served.line(), [served.image_fd, served.tables_fd], on_eof=lambda: log.append(("eof", mapped_now())))
    with exlr8.Lease(h.path, pin=True) as lease:
        addr = exlr8.lease._buffer_address(lease.image_buffer())
    assert h.eof.wait(5)
    assert [e[0] for e in log] == ["register", "unregister", "eof"]
    (_, ptr, size, flags, mapped), (_, ptr2, mapped2), (_, mapped3) = log
    assert (ptr, size, flags) == (addr, served.builder.allocation, 0x1 | 0x8)  # portable, read-only
    assert ptr2 == ptr and mapped2 == mapped and mapped3 == mapped - 1  # unregistered, unmapped, then closed
    # A refused registration fails the opening and lets go.
    log.clear()
    rt.result = 712
    h2 = holders(served.line(), [served.image_fd, served.tables_fd], on_eof=lambda: log.append(("eof", 0)))
    with pytest.raises(exlr8.LeaseError, match="cudaHostRegister .* failed \\(error 712\\)"):
        exlr8.Lease(h2.path, pin=True)
    assert h2.eof.wait(5) and [e[0] for e in log] == ["register", "eof"]
