"""The device-memory path of exlr8.Lease without a GPU: the CUDA driver is
fakecuda.FakeDriver (host buffers as device memory, every call logged),
the holder fakeholder.FakeHolder sending a memfd where a real one sends a
VMM descriptor. The GPU machine's check is gpu_check.py."""

import ctypes
import json
import os

import pytest

import exlr8
from exlr8 import _cuda
import fakecuda
import fakeholder
from test_lease_errors import fill, open_fds, small_builder

GPU0 = ("GPU-00000000-1111-2222-3333-444444444444", "0000:1b:00.0")
GPU1 = ("GPU-abcdef01-2345-6789-abcd-ef0123456789", "0000:4e:00.0")


@pytest.fixture
def drv(monkeypatch):
    d = fakecuda.FakeDriver([GPU0, GPU1])
    monkeypatch.setattr(_cuda, "_driver", d)
    return d


@pytest.fixture
def served():
    s = fakeholder.Served(small_builder(), fill)
    yield s
    s.close()


def device_line(served, gpu=GPU1, handle="fd", nbytes=None):
    d = dict(served.description)
    d["memory"] = {"kind": "device", "device": {"uuid": gpu[0], "pci_bus_id": gpu[1], "ordinal_in_holder": 3},
                   "allocations": [{"bytes": nbytes or served.builder.allocation, "handle": handle}]}
    return json.dumps(d).encode()


@pytest.fixture
def holder(tmp_path):
    made = []

    def make(line, fds, **kw):
        h = fakeholder.FakeHolder(tmp_path / f"d{len(made)}.sock", line, fds, **kw)
        made.append(h)
        return h
    yield make
    for h in made:
        h.close()


def test_a_device_lease_imports_read_only_on_the_gpu_found_by_uuid(drv, served, holder):
    calls_at_eof = []
    h = holder(device_line(served), [served.image_fd, served.tables_fd],
               on_eof=lambda: calls_at_eof.append(list(drv.names())))
    with exlr8.Lease(h.path) as lease:
        assert lease.memory_kind == "device" and lease.device == 1 and lease.gpu_uuid == GPU1[0]
        assert drv.names()[:0] == [] and "cuMemImportFromShareableHandle" in drv.names()
        assert list(drv.access.values()) == [_cuda.CU_MEM_ACCESS_FLAGS_PROT_READ]
        base = lease.device_pointer
        assert base in drv.mapped
        for i, t in enumerate(lease.tensors):
            assert lease.read(t) == fill(i, t.length)
        t = lease.tensor("embed")
        cai = lease.cuda_array(t).__cuda_array_interface__
        assert cai == {"shape": (16, 4), "typestr": "<f2", "data": (base + t.offset, True), "version": 3,
                       "strides": None, "stream": None}
        hh = lease.half(0, "shared", "up", 1)
        assert lease.cuda_array(hh).__cuda_array_interface__["shape"] == (hh.length,)
        ot = lease.offset_table_cuda_array().__cuda_array_interface__
        assert ot["data"][0] == base + lease.description.image.offset_table and ot["typestr"] == "<u8"
        with pytest.raises(exlr8.LeaseError, match="device memory"):
            lease.buffer(t)
        drv.calls.clear()
    assert h.eof.wait(5)
    # Synchronize, unmap, release, free, drop the context: all before the socket closed.
    assert calls_at_eof[0] == ["cuCtxSynchronize", "cuMemUnmap", "cuMemRelease", "cuMemAddressFree",
                               "cuDevicePrimaryCtxRelease"]
    assert not drv.mapped and not drv.imports and not drv.reserved
    with pytest.raises(exlr8.LeaseClosedError):
        lease.read(t)


def test_a_legacy_ipc_handle_is_opened_and_closed(drv, served, holder):
    raw = bytes(range(64))
    drv.ipc[raw] = ctypes.create_string_buffer(served.image, len(served.image))
    h = holder(device_line(served, handle="ipc:" + raw.hex()), [served.tables_fd])
    with exlr8.Lease(h.path) as lease:
        assert lease.read(lease.tensors[3]) == fill(3, lease.tensors[3].length)
        assert "cuIpcOpenMemHandle" in drv.names() and "cuMemImportFromShareableHandle" not in drv.names()
    assert "cuIpcCloseMemHandle" in drv.names() and not drv.mapped


def test_the_gpu_not_visible_is_not_found_naming_the_uuid_and_those_seen(drv, served, holder):
    before = open_fds()
    other = ("GPU-99999999-1111-2222-3333-444444444444", "0000:99:00.0")
    h = holder(device_line(served, gpu=other), [served.image_fd, served.tables_fd])
    with pytest.raises(exlr8.LeaseNotFoundError, match=f"{other[0]} .*0: {GPU0[0]}.*1: {GPU1[0]}"):
        exlr8.Lease(h.path)
    assert open_fds() == before and h.eof.wait(5)
    drv.devices = []
    h2 = holder(device_line(served), [served.image_fd, served.tables_fd])
    with pytest.raises(exlr8.LeaseUnavailableError, match="no CUDA device is visible"):
        exlr8.Lease(h2.path)


def test_a_size_the_allocation_is_not_fails_the_map_and_undoes_everything(drv, served, holder):
    before = open_fds()
    h = holder(device_line(served, nbytes=served.builder.allocation + 256), [served.image_fd, served.tables_fd])
    with pytest.raises(exlr8.CudaError, match="cuMemMap failed") as e:
        exlr8.Lease(h.path)
    assert e.value.call == "cuMemMap"
    assert not drv.reserved and not drv.imports and not drv.mapped
    assert drv.names()[-2:] == ["cuMemRelease", "cuDevicePrimaryCtxRelease"]
    assert open_fds() == before and h.eof.wait(5)


def test_an_image_that_disagrees_releases_the_import(drv, served, holder):
    img = bytearray(served.image)
    img[128:136] = b"deadbeef"  # the header's commit
    fd = fakeholder.memfd(bytes(img))
    h = holder(device_line(served), [fd, served.tables_fd])
    with pytest.raises(exlr8.TablesError, match="commit"):
        exlr8.Lease(h.path)
    assert not drv.reserved and not drv.imports and not drv.mapped
    os.close(fd)


def test_gpu_check_passes_on_the_fake_driver(drv, holder, monkeypatch, capsys):
    """gpu_check.py's device checks, run here before they run on a GPU."""
    import gpu_check
    xxhash = pytest.importorskip("xxhash")
    b = small_builder()
    for i, e in enumerate(b.entries):  # real digests, so that the script's checks can pass
        e["xxh"] = xxhash.xxh64_intdigest(fill(i, e["length"]))
    b.checks = [(xxhash.xxh64_intdigest(fill(ti, n)), [(ti, 0, n)]) for _, [(ti, _, n)] in b.checks]
    served = fakeholder.Served(b, fill)
    try:
        monkeypatch.setattr(gpu_check, "failures", [])
        h = holder(device_line(served), [served.image_fd, served.tables_fd])
        gpu_check.check_lease(h.path, 1, None)
        gpu_check.check_failed_import()
        out = capsys.readouterr().out
        assert gpu_check.failures == [], out
        assert "ok   __cuda_array_interface__" in out and "ok   a bogus IPC handle" in out
        assert not drv.mapped and not drv.imports
    finally:
        served.close()


class _TorchRefusingReadOnly:
    """Stands in for torch where it matters here: torch.as_tensor refuses a
    __cuda_array_interface__ flagged read-only, as torch 2.11 did on the
    H200 ("the read only flag is not supported, should always be False")."""

    def __init__(self):
        self.seen = []

    def as_tensor(self, obj, device=None):
        cai = obj.__cuda_array_interface__
        if cai["data"][1]:
            raise TypeError("the read only flag is not supported, should always be False")
        self.seen.append((cai, device))
        return cai


def test_torch_gets_device_arrays_it_accepts(drv, served, holder, monkeypatch):
    fake_torch = _TorchRefusingReadOnly()
    monkeypatch.setitem(__import__("sys").modules, "torch", fake_torch)
    h = holder(device_line(served), [served.image_fd, served.tables_fd])
    with exlr8.Lease(h.path) as lease:
        t = lease.tensor("embed")
        cai = lease.torch(t)
        assert cai["data"] == (lease.device_pointer + t.offset, False) and cai["shape"] == (16, 4)
        table = lease.offset_table_torch()
        assert table["data"][0] == lease.device_pointer + lease.description.image.offset_table
        assert [d for _, d in fake_torch.seen] == ["cuda:1", "cuda:1"]
        # What other consumers get stays flagged read-only.
        assert lease.cuda_array(t).__cuda_array_interface__["data"][1] is True
