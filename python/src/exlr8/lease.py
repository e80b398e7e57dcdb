"""exlr8.Lease: the lessee's side of lease protocol v2
(schema/lease/PROTOCOL.md), in pure Python.

    with exlr8.Lease("/run/exlr8/rank0.sock") as lease:
        t = lease.half(3, "shared", "up", 0)
        w = lease.torch(t)            # zero-copy

Opening: connect to the holder's Unix socket, read the description line and
the descriptors that ride on its first byte (SCM_RIGHTS), check the framing
and descriptor count, parse the description strictly (description.py), check
the tables' memfd (a sealed regular file of tables.bytes), parse the tables
strictly (tables.py), then map the image (host memory) or import it on the
GPU found by UUID (device memory, _cuda.py), and check the image's header and
offset table against the tables and the description. Every descriptor
received is closed on every error path.

Letting go, in the order PROTOCOL.md asks: unregister from CUDA (host,
pin=True), unmap the image or release the GPU import, then close the socket
(the holder counts the lessee gone only then). close() does it, is
idempotent and runs on __exit__ (also after an exception), when the object
is collected, and at interpreter exit (weakref.finalize).

A host image whose buffers are still referenced at close() (a memoryview,
numpy array or torch tensor made from it) cannot be unmapped yet: close()
then leaves the mapping to go with the last such reference, and the socket
with it (the holder keeps counting this lessee until then, which is true:
it still maps the memory), with a ResourceWarning.

About 930 lines: the Lease class is the package's public object, and most of
it is the contract of each accessor (half, signs, tensor, torch, numpy) and
the one order of letting go that every path (close, __exit__, collection,
interpreter exit) shares.
"""

from __future__ import annotations

import array
import atexit
import ctypes
import errno
import mmap
import os
import select
import socket
import stat
import sys
import threading
import time
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from . import tables as _t
from .description import Description, parse_description
from .errors import (LeaseClosedError, LeaseCorruptionError, LeaseError, LeaseIOError, LeaseNotFoundError,
                     LeasePermissionError, LeaseUnavailableError, LeaseVersionError, TablesError)
from .tables import Check, ImageHeader, Tables, TensorInfo

MAX_HOLDER_LINE_BYTES = 256
MAX_FDS = 9  # 8 allocations + the tables
_CMSG_FDS = 2 * MAX_FDS  # room for more than any description names
_RELEASE_PREFIX = b'{"type":"release","deadline_s":'

# fcntl F_GET_SEALS and the seal bits (linux/fcntl.h), not in Python's fcntl before 3.8 on every platform.
_F_GET_SEALS = 1034
_F_SEAL_SHRINK, _F_SEAL_GROW, _F_SEAL_WRITE, _F_SEAL_FUTURE_WRITE = 0x2, 0x4, 0x8, 0x10


@dataclass(frozen=True)
class Release:
    """What the holder said after the description: free the memory within
    ``deadline_s`` seconds (from when it was sent), or, ``holder_gone``,
    it closed its side (died or stopped) instead."""
    deadline_s: int
    holder_gone: bool
    received_at: float  # time.monotonic() when this process read it


def _socket_error(e: OSError, what: str) -> LeaseError:
    msg = f"{what}: {os.strerror(e.errno) if e.errno else e}"
    if e.errno == errno.ENOENT:
        return LeaseNotFoundError(msg)
    if e.errno in (errno.EACCES, errno.EPERM):
        return LeasePermissionError(msg)
    if e.errno in (errno.ECONNREFUSED,):
        return LeaseUnavailableError(msg + " (no holder is listening)")
    return LeaseIOError(msg)


def parse_release_line(line: bytes) -> int:
    """The holder's release line ({"type":"release","deadline_s":D}, exactly),
    its D. LeaseCorruptionError for anything else."""
    def bad(why: str) -> LeaseCorruptionError:
        q = "".join(chr(c) if 0x20 <= c < 0x7F and c not in (0x22, 0x5C) else "?" for c in line[:64])
        return LeaseCorruptionError(f'lease socket: holder line "{q}"{"..." if len(line) > 64 else ""}: {why}')
    if not line.startswith(_RELEASE_PREFIX):
        raise bad('not {"type":"release","deadline_s":D}')
    num = line[len(_RELEASE_PREFIX):]
    if not num.endswith(b"}"):
        raise bad("does not end with '}' after deadline_s")
    num = num[:-1]
    if not num or len(num) > 4 or (len(num) > 1 and num[:1] == b"0") or not num.isdigit() or int(num) > 3600:
        raise bad("deadline_s is not a decimal in [0, 3600]")
    return int(num)


def _recv(sock: socket.socket, size: int, flags: int = 0):
    """One recvmsg: (bytes, fds, truncated, other control data)."""
    msg, anc, mflags, _ = sock.recvmsg(size, socket.CMSG_SPACE(_CMSG_FDS * 4), flags | socket.MSG_CMSG_CLOEXEC)
    fds: List[int] = []
    other = False
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(data[:len(data) - len(data) % a.itemsize])
            fds.extend(a)
        else:
            other = True
    return msg, fds, bool(mflags & socket.MSG_CTRUNC), other


def _close_fds(fds: Sequence[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def check_memfd(fd: int, nbytes: int, what: str, source: str) -> None:
    """A regular file of exactly ``nbytes``, sealed against shrinking, growing
    and writing (F_SEAL_WRITE or F_SEAL_FUTURE_WRITE); LeaseCorruptionError otherwise."""
    import fcntl
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise LeaseCorruptionError(f"lease from {source}: {what} is not a regular file (a memfd)")
    if st.st_size != nbytes:
        raise LeaseCorruptionError(f"lease from {source}: {what} has {st.st_size} bytes")
    try:
        seals = fcntl.fcntl(fd, getattr(fcntl, "F_GET_SEALS", _F_GET_SEALS))
    except OSError:
        seals = -1
    need = _F_SEAL_SHRINK | _F_SEAL_GROW
    if seals < 0 or seals & need != need or not seals & (_F_SEAL_WRITE | _F_SEAL_FUTURE_WRITE):
        raise LeaseCorruptionError(f"lease from {source}: {what} is not sealed against shrinking, growing and "
                                   f"writing (seals {seals})")


class _Connection:
    """The open socket after the opening, and the release line's reader."""

    def __init__(self, sock: socket.socket, rest: bytes):
        self.sock = sock
        self.buf = rest
        self.release: Optional[Release] = None
        self.lock = threading.Lock()

    def poll(self) -> Optional[Release]:
        """Reads what the holder sent, without blocking."""
        with self.lock:
            while self.release is None:
                nl = self.buf.find(b"\n")
                if nl >= 0:
                    line, self.buf = self.buf[:nl], self.buf[nl + 1:]
                    self.release = Release(parse_release_line(line), False, time.monotonic())
                    break
                if len(self.buf) > MAX_HOLDER_LINE_BYTES:
                    raise LeaseCorruptionError(
                        f"lease socket: a line is longer than {MAX_HOLDER_LINE_BYTES} bytes")
                if self.sock is None:
                    raise LeaseClosedError("lease socket: the lease is closed")
                try:
                    data, fds, trunc, other = _recv(self.sock, 512, socket.MSG_DONTWAIT)
                except (BlockingIOError, InterruptedError):
                    return None
                except OSError as e:
                    raise _socket_error(e, "lease socket: read from the holder") from None
                if fds or trunc or other:
                    _close_fds(fds)
                    raise LeaseCorruptionError(f"lease socket: the holder sent {len(fds)} file descriptors (or "
                                               "other control data) after the description")
                if not data:
                    self.release = Release(0, True, time.monotonic())
                    break
                self.buf += data
            return self.release

    def close(self) -> None:
        with self.lock:
            if self.sock is not None:
                self.sock.close()
                self.sock = None


def _receive(path: str, timeout: float):
    """Connects and receives the opening: (socket, description, fds, rest of bytes)."""
    source = str(path)
    where = f"lease holder at {source}"
    if len(os.fsencode(source)) > 107:
        raise LeaseNotFoundError(f"{where}: the path is longer than 107 bytes")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    fds: List[int] = []
    ok = False
    try:
        try:
            sock.connect(source)
        except OSError as e:
            raise _socket_error(e, f"connect to the {where}") from None
        end = time.monotonic() + timeout
        too_slow = f"the {where} sent no whole description within {timeout:g} s"
        buf = b""
        any_bytes = False
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise LeaseUnavailableError(too_slow)
            sock.settimeout(left)
            try:
                data, got, trunc, other = _recv(sock, 1 << 16)
            except socket.timeout:
                raise LeaseUnavailableError(too_slow) from None
            except InterruptedError:
                continue
            except OSError as e:
                raise _socket_error(e, f"read the lease description from the {where}") from None
            fds.extend(got)
            if trunc:
                raise LeaseCorruptionError(f"lease description from {source}: more than {_CMSG_FDS} file "
                                           "descriptors came with it")
            if other:
                raise LeaseCorruptionError(f"lease description from {source}: control data other than SCM_RIGHTS")
            if got and any_bytes:
                raise LeaseCorruptionError(f"lease description from {source}: {len(got)} file descriptors came "
                                           "after its first byte (all must come with it)")
            if not data:
                if not any_bytes:
                    raise LeaseUnavailableError(f"the {where} closed the connection without a description (it "
                                                "is stopping, or holds 256 lessees already)")
                _refuse_v1(buf, source)
                raise LeaseCorruptionError(f"lease description from {source}: the holder closed after "
                                           f"{len(buf)} bytes, before the description's end of line")
            any_bytes = True
            buf += data
            nl = buf.find(b"\n")
            if nl < 0 and len(buf) > 65536 or nl > 65536:
                raise LeaseCorruptionError(f"lease description from {source}: longer than 65536 bytes without "
                                           "its end of line")
            if nl >= 0:
                line, rest = buf[:nl], buf[nl + 1:]
                break
        sock.settimeout(None)
        _refuse_v1(line, source)
        try:
            d = parse_description(line)
        except LeaseError as e:
            e.args = (str(e).replace("lease description: ", f"lease description from {source}: ", 1),)
            raise
        if len(fds) != d.fd_count:
            raise LeaseCorruptionError(f"lease description from {source}: names {d.fd_count} file descriptors "
                                       f"({d.fd_count - 1} allocations with handle \"fd\" and the tables) but "
                                       f"{len(fds)} came with it")
        ok = True
        return sock, d, fds, rest
    finally:
        if not ok:
            _close_fds(fds)
            sock.close()


def _refuse_v1(text: bytes, source: str) -> None:
    if text.startswith(b'{"version":1,') or text.startswith(b'{"version":1}'):
        raise LeaseVersionError(f"lease description from {source}: the holder speaks lease protocol v1 (CUDA IPC "
                                "handles), not v2")


def _read_tables(fd: int, d: Description, verify_checks: bool) -> Tables:
    with mmap.mmap(fd, d.tables.bytes, mmap.MAP_SHARED, mmap.PROT_READ) as m:
        return _t.parse_tables(m, d.image.bytes, verify_checks=verify_checks)


def check_image(d: Description, tables: Tables, header: bytes, offset_table: bytes, source: str) -> ImageHeader:
    """The image's header parsed and checked against the tables and the
    description, and its offset table equal to the tables' (CheckLeaseV2Image)."""
    h = _t.parse_image_header(header)
    _t.check_agreement(h, tables)
    err = lambda what: TablesError(f"lease description and image disagree: {what}", "image header")  # noqa: E731
    im = d.image
    if im.bytes != h.allocation_bytes or im.bytes != tables.allocation_bytes:
        raise err(f"image bytes {im.bytes} vs header {h.allocation_bytes}, tables {tables.allocation_bytes}")
    if (im.layers, im.experts, im.halves) != (h.layers, h.experts, h.halves_per_proj):
        raise err(f"dimensions {im.layers}x{im.experts}x{im.halves} vs header "
                  f"{h.layers}x{h.experts}x{h.halves_per_proj}")
    if (im.offset_table, im.offset_table_bytes) != h.offset_table:
        raise err(f"offset table at {im.offset_table} ({im.offset_table_bytes} bytes) vs header "
                  f"{h.offset_table[0]} ({h.offset_table[1]})")
    if (h.tp, h.rank) != (d.tp, d.rank):
        raise err(f"rank {d.rank} of {d.tp} vs header {h.rank} of {h.tp}")
    if h.commit != d.commit:
        raise err(f"commit {d.commit!r} vs header {h.commit!r}")
    strings = sum(len(n.encode()) + 1 for n in tables._names.values())
    if (d.tables.tensors, d.tables.checks, d.tables.strings) != (len(tables.tensors), tables._n_checks, strings):
        raise err(f"tables of {d.tables.tensors}/{d.tables.checks}/{d.tables.strings} tensors/checks/string "
                  f"bytes vs {len(tables.tensors)}/{tables._n_checks}/{strings}")
    want = tables.offset_table.tobytes() if sys.byteorder == "little" else None
    if want is None:
        a = array.array("Q", tables.offset_table)
        a.byteswap()
        want = a.tobytes()
    if bytes(offset_table) != want:
        got = array.array("Q")
        got.frombytes(bytes(offset_table))
        for i, (g, w) in enumerate(zip(got, tables.offset_table)):
            if g != w:
                at = d.image.offset_table + 8 * i
                raise TablesError(f"lease from {source}: the image's offset table entry {i} at byte {at} is {g}, "
                                  f"the tables' {w}", "image offset_table", i, "offset", at)
    return h


class Lease:
    """An open v2 lease on a rank image (host or device memory).

    ``Lease(socket_path, timeout=30.0, pin=False, on_release=None, verify_checks=False)``:
    opens the lease (see the module's docstring for what is checked);
    raises a LeaseError subclass naming what failed. ``pin=True`` (host
    memory) registers the mapping with CUDA through torch
    (cudaHostRegister, read-only) so that copies from it are DMA.
    ``on_release(lease, release)``, when given, is called once from a
    watcher thread when the holder asks for the memory back (or goes
    away); it typically arranges for the serving process to let go
    (close()) before ``release.deadline_s``. ``verify_checks``: check the tables'
    check entries during the opening too; by default they are checked
    (same rules, same TablesError) when ``checks`` is first read, since
    the opening does not use them and they are a third of its time at
    GLM-5.3 scale.

    Not synchronized beyond what is said: use one Lease from one thread,
    except release_requested / poll_release, which are safe from any.
    """

    def __init__(self, socket_path: Union[str, os.PathLike], timeout: float = 30.0, pin: bool = False,
                 on_release: Optional[Callable[["Lease", Release], Any]] = None, verify_checks: bool = False):
        self.path = os.fspath(socket_path)
        self._state: Dict[str, Any] = {"conn": None, "mmap": None, "base": None, "pinned": None,
                                       "device": None, "native": None}
        self._finalizer = weakref.finalize(self, _let_go, self._state, self.path)
        _watch_exit()
        sock, d, fds, rest = _receive(self.path, timeout)
        self._state["conn"] = _Connection(sock, rest)
        try:
            self.description: Description = d
            tables_fd = fds[-1]
            check_memfd(tables_fd, d.tables.bytes, f"file descriptor {len(fds) - 1} (tables.bytes {d.tables.bytes})",
                        self.path)
            if d.memory_kind == "host":
                for i in range(len(fds) - 1):
                    check_memfd(fds[i], d.allocations[i].bytes,
                                f"file descriptor {i} (memory.allocations[{i}].bytes {d.allocations[i].bytes})",
                                self.path)
            try:
                self.tables: Tables = _read_tables(tables_fd, d, verify_checks)
            except OSError as e:
                raise _socket_error(e, f"lease from {self.path}: map the tables ({d.tables.bytes} bytes)") from None
            fd_of = {}
            k = 0
            for i, a in enumerate(d.allocations):
                if a.is_fd:
                    fd_of[i] = fds[k]
                    k += 1
            if d.memory_kind == "host":
                self._open_host(fd_of[d.image.allocation])
            else:
                self._open_device(fd_of.get(d.image.allocation))
            if pin:
                self._pin()
        except BaseException:
            _close_fds(fds)
            self.close()
            raise
        _close_fds(fds)  # the mapping or the import holds the memory
        self._watcher = None
        if on_release is not None:
            self._start_watcher(on_release)

    # -- opening -----------------------------------------------------------

    def _open_host(self, fd: int) -> None:
        d = self.description
        nbytes = d.allocations[d.image.allocation].bytes
        try:
            m = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ)
        except OSError as e:
            raise _socket_error(e, f"lease from {self.path}: map allocation {d.image.allocation} ({nbytes} bytes)") \
                from None
        self._state["mmap"] = m
        base = memoryview(m)[d.image.header_offset:d.image.header_offset + d.image.bytes]
        self._state["base"] = base
        im = d.image
        # Copies: no view of the mapping may outlive a refusal (close() could not unmap).
        self.header: ImageHeader = check_image(d, self.tables, bytes(base[:_t.IMAGE_HEADER_BYTES]),
                                               bytes(base[im.offset_table:im.offset_table + im.offset_table_bytes]),
                                               self.path)

    def _open_device(self, fd: Optional[int]) -> None:
        from . import _cuda
        d = self.description
        dev = _cuda.DeviceImage.open(d, fd, self.path)
        self._state["device"] = dev
        im = d.image
        header = dev.copy_to_host(0, _t.IMAGE_HEADER_BYTES)
        table = dev.copy_to_host(im.offset_table, im.offset_table_bytes)
        self.header = check_image(d, self.tables, header, table, self.path)

    def _pin(self) -> None:
        if self.description.memory_kind != "host":
            return
        import torch  # pin=True needs torch's CUDA runtime
        cudart = torch.cuda.cudart()
        m = self._state["mmap"]
        addr = _buffer_address(m)
        # cudaHostRegisterPortable | cudaHostRegisterReadOnly: the mapping is PROT_READ.
        err = cudart.cudaHostRegister(addr, len(m), 0x1 | 0x8)
        code = int(getattr(err, "value", err))
        if code != 0:
            raise LeaseError(f"lease from {self.path}: cudaHostRegister of {len(m)} bytes failed (error {code})")
        self._state["pinned"] = (cudart, addr)

    # -- what the lease holds ------------------------------------------------

    @property
    def repo(self) -> str:
        return self.description.repo

    @property
    def commit(self) -> str:
        return self.description.commit

    @property
    def manifest(self) -> str:
        return self.description.manifest

    @property
    def tp(self) -> int:
        return self.description.tp

    @property
    def rank(self) -> int:
        return self.description.rank

    @property
    def memory_kind(self) -> str:
        """"host" or "device"."""
        return self.description.memory_kind

    @property
    def gpu_uuid(self) -> Optional[str]:
        return self.description.device.uuid if self.description.device else None

    @property
    def pci_bus_id(self) -> Optional[str]:
        return self.description.device.pci_bus_id if self.description.device else None

    @property
    def allocations(self):
        """[Allocation(bytes, handle)], as described."""
        return self.description.allocations

    @property
    def proof(self) -> Dict[str, Any]:
        """The proof of contents (description-v2.schema.json's proof) as a dict."""
        return self.description.proof

    @property
    def release_deadline_s(self) -> int:
        return self.description.release_deadline_s

    @property
    def tensors(self) -> Sequence[TensorInfo]:
        return self.tables.tensors

    @property
    def checks(self) -> List[Check]:
        return self.tables.checks

    def tensor(self, name: str) -> Optional[TensorInfo]:
        """The dense or plain tensor of that name, or None."""
        return self.tables.tensor(name)

    def half(self, layer: int, expert: Union[int, str], proj: Union[int, str], half: int) -> Optional[TensorInfo]:
        """The half record (layer, expert | "shared", "gate"|"up"|"down" or
        0..2, half), or None where this rank does not own it."""
        return self.tables.half(layer, expert, proj, half)

    def signs(self, layer: int, out: bool = False) -> Optional[TensorInfo]:
        """A layer's signs.in (out False) or signs.out, or None."""
        return self.tables.signs(layer, out)

    def names(self) -> List[str]:
        """The dense and plain tensors' names, in table order."""
        return self.tables.names()

    @property
    def offset_table(self) -> array.array:
        """The pointer table (host copy): u64 offsets from the image's base,
        index Tables.offset_index(...), 0xFFFFFFFFFFFFFFFF where not owned."""
        return self.tables.offset_table

    @property
    def device(self) -> Optional[int]:
        """Device memory: the CUDA ordinal of the holder's GPU in this process."""
        dev = self._state["device"]
        return dev.ordinal if dev else None

    @property
    def device_pointer(self) -> int:
        """Device memory: the image's base address on the device."""
        return self._live_device().base

    def _live_host(self) -> memoryview:
        if self._state["base"] is None:
            if self.description.memory_kind != "host":
                raise LeaseError("this lease holds device memory: use cuda_array() or torch()")
            raise LeaseClosedError(f"lease from {self.path} is closed")
        return self._state["base"]

    def _live_device(self):
        dev = self._state["device"]
        if dev is None:
            if self.description.memory_kind != "device":
                raise LeaseError("this lease holds host memory: use buffer(), numpy() or torch()")
            raise LeaseClosedError(f"lease from {self.path} is closed")
        return dev

    def _resolve(self, t: Union[TensorInfo, str]) -> TensorInfo:
        if isinstance(t, str):
            found = self.tensor(t)
            if found is None:
                raise KeyError(f"no tensor named {t!r} in this lease")
            return found
        return t

    def buffer(self, t: Union[TensorInfo, str]) -> memoryview:
        """Host memory: the region's bytes, a read-only memoryview into the
        mapping (no copy). Valid until close(); holding it past close()
        keeps the mapping (and the connection) until it is released."""
        t = self._resolve(t)
        return self._live_host()[t.offset:t.offset + t.length]

    def read(self, t: Union[TensorInfo, str], offset: int = 0, length: Optional[int] = None) -> bytes:
        """A copy of the region's bytes [offset, offset + length) in host
        memory, whatever the memory kind (device: cuMemcpyDtoH)."""
        t = self._resolve(t)
        length = t.length - offset if length is None else length
        if offset < 0 or length < 0 or offset + length > t.length:
            raise ValueError(f"[{offset}, +{length}) is not inside {t.what()} of {t.length} bytes")
        if self.description.memory_kind == "device":
            return self._live_device().copy_to_host(t.offset + offset, length)
        return bytes(self._live_host()[t.offset + offset:t.offset + offset + length])

    def image_buffer(self) -> memoryview:
        """Host memory: the whole image, read-only."""
        return self._live_host()[:]

    def offset_table_buffer(self) -> memoryview:
        """Host memory: the pointer table inside the image, read-only u64 ("Q")."""
        im = self.description.image
        return self._live_host()[im.offset_table:im.offset_table + im.offset_table_bytes].cast("Q")

    def numpy(self, t: Union[TensorInfo, str]):
        """Host memory: a read-only numpy array over the region (no copy),
        shaped and typed as stored. dtypes numpy lacks (BF16, F8_E4M3,
        F8_E5M2) come as the unsigned integers of their size (uint16,
        uint8); a half record comes as its raw bytes (uint8), since its
        trellis, slice and block row differ in type (see half_parts())."""
        import numpy as np
        t = self._resolve(t)
        buf = self.buffer(t)
        if t.kind == "half":
            return np.frombuffer(buf, dtype=np.uint8)
        a = np.frombuffer(buf, dtype=_NUMPY_DTYPES[t.dtype])
        return a.reshape(t.shape) if t.shape else a.reshape(())

    def torch(self, t: Union[TensorInfo, str]):
        """A torch tensor over the region, no copy: host memory through
        torch.frombuffer, device memory through __cuda_array_interface__
        on this lease's device. Shaped and typed as stored (torch has
        bfloat16 and float8); a half record comes as its raw bytes
        (uint8).

        The memory is read-only: the image is mapped PROT_READ (host) or
        imported with read access only (device). torch has no read-only
        tensors, so torch.frombuffer's warning about a non-writable buffer
        is suppressed here, and writing into such a tensor kills the
        process (SIGSEGV on the host, an illegal address on the GPU): use
        .clone() for a writable copy. torch.as_tensor refuses a
        __cuda_array_interface__ flagged read-only ("the read only flag is
        not supported"), so the device array handed to it is not flagged;
        a VMM import is read-only in the GPU's page tables all the same."""
        import torch
        t = self._resolve(t)
        if self.description.memory_kind == "device":
            x = torch.as_tensor(self.cuda_array(t, readonly=False), device=f"cuda:{self.device}")
            if t.kind != "half" and t.dtype in ("BF16", "F8_E4M3", "F8_E5M2"):
                x = x.view(_torch_dtype(torch, t.dtype))  # the same bits, torch's own dtype
            return x
        buf = self.buffer(t)
        dtype = torch.uint8 if t.kind == "half" else _torch_dtype(torch, t.dtype)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*not writable.*")
            warnings.filterwarnings("ignore", message=".*non-writable.*")
            x = torch.frombuffer(buf, dtype=dtype)
        if t.kind != "half":
            x = x.reshape(t.shape) if t.shape else x.reshape(())
        return x

    def offset_table_torch(self):
        """The pointer table as a torch int64 tensor (u64 offsets reinterpreted;
        ABSENT reads -1), in the lease's memory (host or device), no copy."""
        import torch
        im = self.description.image
        fake = TensorInfo(-1, "offset_table", "plain", None, None, None, None, "I64",
                          (im.offset_table_bytes // 8,), im.offset_table, im.offset_table_bytes, 0)
        if self.description.memory_kind == "device":
            return torch.as_tensor(self.cuda_array(fake, readonly=False), device=f"cuda:{self.device}")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*not writable.*")
            warnings.filterwarnings("ignore", message=".*non-writable.*")
            return torch.frombuffer(self.offset_table_buffer().cast("B"), dtype=torch.int64)

    def cuda_array(self, t: Union[TensorInfo, str], readonly: bool = True):
        """Device memory: an object with __cuda_array_interface__ (version 3,
        flagged read-only unless `readonly` is False) over the region,
        shaped and typed as stored (a half record: its bytes)."""
        from . import _cuda
        t = self._resolve(t)
        dev = self._live_device()
        if t.kind == "half":
            return _cuda.CudaArray(dev.base + t.offset, (t.length,), "|u1", self, readonly)
        return _cuda.CudaArray(dev.base + t.offset, t.shape, _CUDA_TYPESTR[t.dtype], self, readonly)

    def offset_table_cuda_array(self, readonly: bool = True):
        """Device memory: the pointer table in the image, a (n,) "<u8" device array."""
        from . import _cuda
        im = self.description.image
        return _cuda.CudaArray(self._live_device().base + im.offset_table, (im.offset_table_bytes // 8,), "<u8",
                               self, readonly)

    def half_parts(self, t: TensorInfo):
        """A half record's three parts as (trellis bytes, slice, block row)
        (TensorInfo-like: offset, length, dtype, shape), for numpy/torch."""
        if t.kind != "half":
            raise ValueError(f"{t.what()} is not a half record")
        tb, n_slice, n_block = t.shape
        vs = _t.DTYPE_SIZES[_t.DTYPE_NAMES.index(t.dtype)]
        mk = lambda name, off, n, dt, shape: TensorInfo(t.index, name, "plain", t.layer, None, None, None, dt,  # noqa
                                                        shape, off, n, 0)
        return (mk("trellis", t.offset, tb, "U8", (tb,)),
                mk("slice", t.offset + tb, n_slice * vs, t.dtype, (n_slice,)),
                mk("block", t.offset + tb + n_slice * vs, t.length - tb - n_slice * vs, t.block_dtype, (n_block,)))

    def half_weights(self, t: Union[TensorInfo, int], out=None, stream=None):
        """The reconstructed weights W of half record `t` (a TensorInfo or its
        index), fp32, (input, output) orientation (spec 8.4: the HF weight is
        W transposed): gate/up (hidden, 128), down (128, hidden). Computed by
        libexlr8client's exlr8_lease_half_weights through ctypes (the
        library: EXLR8CLIENT_LIBRARY or ctypes.util.find_library; a lease of
        its own on the same socket, opened at first use, let go by close()).

        Host memory: into `out` (a writable C-contiguous float32 buffer of
        128 * hidden elements) or a new numpy array (array.array('f')
        without numpy); returns it. Device memory: into `out` (a float32
        CUDA tensor or __cuda_array_interface__ object on the lease's GPU) or
        a new torch tensor there; enqueued on `stream` (a torch stream, a
        CUstream as int; default: torch's current stream, else the legacy
        default stream): synchronise before reading it.
        Raises LeaseUnavailableError without the library, ValueError for a
        tensor that is not a half record or an `out` of the wrong size."""
        if isinstance(t, int):
            t = self.tensors[t]
        if t.kind != "half":
            raise ValueError(f"{t.what()} is not a half record")
        if self.closed:
            raise LeaseClosedError(f"lease from {self.path} is closed")
        hidden = t.shape[0] // (16 * t.k)
        elems = 128 * hidden
        shape = (128, hidden) if t.proj == "down" else (hidden, 128)
        from . import _native
        native = self._state.get("native")
        device = self.description.memory_kind != "host"
        if native is None:
            native = _native.NativeLease(self.path, _native.MEMORY_DEVICE if device else _native.MEMORY_HOST)
            self._state["native"] = native
        if not device:
            if out is None:
                try:
                    import numpy as np
                    out = np.empty(shape, dtype=np.float32)
                except ImportError:
                    out = array.array("f", bytes(4 * elems))
            view = memoryview(out).cast("B")
            if view.readonly or not view.c_contiguous or view.nbytes != 4 * elems:
                raise ValueError(f"out: a writable contiguous buffer of {elems} float32 is needed")
            ptr = ctypes.addressof(ctypes.c_char.from_buffer(view))
            del view
            native.half_weights(t.index, ptr, elems)
            return out
        torch = None
        try:
            import torch
        except ImportError:
            pass
        if out is None:
            if torch is None:
                raise LeaseUnavailableError("half_weights of a device lease without `out` needs torch")
            out = torch.empty(shape, dtype=torch.float32, device=f"cuda:{self.device}")
        cai = out.__cuda_array_interface__
        if cai["typestr"] != "<f4" or cai.get("strides") not in (None, (4 * shape[1], 4)) or \
                _prod(cai["shape"]) != elems:
            raise ValueError(f"out: a contiguous float32 CUDA array of {elems} elements is needed")
        if stream is None:
            stream = torch.cuda.current_stream(self.device).cuda_stream if torch is not None else 0
        elif hasattr(stream, "cuda_stream"):
            stream = stream.cuda_stream
        native.half_weights(t.index, cai["data"][0], elems, int(stream))
        return out

    # -- the holder's release line -------------------------------------------

    def poll_release(self) -> Optional[Release]:
        """The holder's release (or its going away), if it came; never blocks."""
        conn = self._state["conn"]
        if conn is None:
            raise LeaseClosedError(f"lease from {self.path} is closed")
        return conn.poll()

    @property
    def release_requested(self) -> bool:
        """Whether the holder asked for the memory back (or went away). Let go soon: close()."""
        conn = self._state["conn"]
        if conn is None:
            return False
        return conn.poll() is not None

    def wait_release(self, timeout: Optional[float] = None) -> Optional[Release]:
        """Waits up to ``timeout`` seconds (None: forever) for the release."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            r = self.poll_release()
            if r is not None:
                return r
            conn = self._state["conn"]
            left = 60.0 if end is None else end - time.monotonic()
            if left <= 0:
                return None
            sock = conn.sock
            if sock is None:
                raise LeaseClosedError(f"lease from {self.path} is closed")
            select.select([sock], [], [], min(left, 60.0))

    def fileno(self) -> int:
        """The connection's descriptor (readable when the holder sends its release), for a selector."""
        conn = self._state["conn"]
        if conn is None or conn.sock is None:
            raise LeaseClosedError(f"lease from {self.path} is closed")
        return conn.sock.fileno()

    def _start_watcher(self, callback) -> None:
        ref = weakref.ref(self)
        conn = self._state["conn"]

        def watch():
            while True:
                sock = conn.sock
                if sock is None:
                    return
                try:
                    select.select([sock], [], [], 0.25)
                    r = conn.poll()
                except (LeaseError, OSError, ValueError):
                    return
                if r is not None:
                    lease = ref()
                    if lease is not None:
                        callback(lease, r)
                    return

        self._watcher = threading.Thread(target=watch, name=f"exlr8-lease-release {self.path}", daemon=True)
        self._watcher.start()

    # -- letting go ------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._state["conn"] is None

    def close(self) -> None:
        """Lets go: unregisters from CUDA, unmaps the image (or releases the
        GPU import, after synchronizing its device), then closes the
        connection. Idempotent; safe after a failed opening."""
        _let_go(self._state, self.path)
        w = getattr(self, "_watcher", None)
        if w is not None and w is not threading.current_thread():
            w.join(timeout=1.0)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        d = self.description if hasattr(self, "description") else None
        if d is None:
            return f"<exlr8.Lease {self.path} (not open)>"
        return (f"<exlr8.Lease {self.path} {d.repo}@{d.commit[:8]} TP {d.tp} rank {d.rank} {d.memory_kind} "
                f"{'closed' if self.closed else 'open'}>")


_exiting = False
_exit_watched = False


def _watch_exit() -> None:
    """Registers, after weakref.finalize's own atexit hook exists, one that
    runs before it (atexit is last in, first out): the finalizers that then
    let go of leases know it is interpreter exit."""
    global _exit_watched
    if not _exit_watched:
        _exit_watched = True

        def mark():
            global _exiting
            _exiting = True
        atexit.register(mark)


def _let_go(state: Dict[str, Any], path: str) -> None:
    """Unregister, unmap / release, then close the socket (PROTOCOL.md's order)."""
    native = state.get("native")
    if native is not None:
        state["native"] = None
        native.close()
    pinned = state.get("pinned")
    if pinned is not None:
        state["pinned"] = None
        cudart, addr = pinned
        try:
            cudart.cudaHostUnregister(addr)
        except Exception:  # noqa: BLE001 - the CUDA context may be gone at exit
            pass
    conn = state.get("conn")
    state["conn"] = None
    dev = state.get("device")
    if dev is not None:
        state["device"] = None
        try:
            dev.release()
        except Exception as e:  # noqa: BLE001
            warnings.warn(f"exlr8: releasing the GPU import of the lease from {path} failed: {e}", RuntimeWarning)
    base = state.get("base")
    state["base"] = None
    m = state.get("mmap")
    state["mmap"] = None
    if base is not None:
        try:
            base.release()
        except BufferError:
            pass  # exported: the mapping then stays until that export goes (below)
    if m is not None:
        try:
            m.close()
        except BufferError:
            # Views of the image are still alive: the mapping goes with the
            # last of them, and the connection with the mapping.
            if conn is not None:
                weakref.finalize(m, conn.close)
                conn = None
            if not _exiting:  # at exit the kernel lets go: nothing to warn about
                warnings.warn(f"exlr8: the lease from {path} was closed while buffers of its image are still "
                              "referenced; it lets go when they are released", ResourceWarning)
    if conn is not None:
        conn.close()


def _buffer_address(obj) -> int:
    """The address of a (read-only) buffer, through the buffer protocol."""
    import ctypes

    class Py_buffer(ctypes.Structure):
        _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.py_object), ("len", ctypes.c_ssize_t),
                    ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                    ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                    ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]

    view = Py_buffer()
    get = ctypes.pythonapi.PyObject_GetBuffer
    get.argtypes = [ctypes.py_object, ctypes.POINTER(Py_buffer), ctypes.c_int]
    if get(obj, ctypes.byref(view), 0) != 0:
        raise LeaseError("cannot take the image's address")
    try:
        return view.buf
    finally:
        rel = ctypes.pythonapi.PyBuffer_Release
        rel.argtypes = [ctypes.POINTER(Py_buffer)]
        rel(ctypes.byref(view))


_NUMPY_DTYPES = {"BOOL": "?", "U8": "u1", "I8": "i1", "F8_E4M3": "u1", "F8_E5M2": "u1", "I16": "<i2", "U16": "<u2",
                 "F16": "<f2", "BF16": "<u2", "I32": "<i4", "U32": "<u4", "F32": "<f4", "F64": "<f8", "I64": "<i8",
                 "U64": "<u8"}
# __cuda_array_interface__ typestr; BF16 and F8 have none: consumers see their bits (torch.as_tensor
# of such an array gives uint16/uint8; .view(torch.bfloat16) reinterprets without a copy).
_CUDA_TYPESTR = {"BOOL": "|b1", "U8": "|u1", "I8": "|i1", "F8_E4M3": "|u1", "F8_E5M2": "|u1", "I16": "<i2",
                 "U16": "<u2", "F16": "<f2", "BF16": "<u2", "I32": "<i4", "U32": "<u4", "F32": "<f4", "F64": "<f8",
                 "I64": "<i8", "U64": "<u8"}


def _torch_dtype(torch, name: str):
    table = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
             "I16": "int16", "U16": "uint16", "F16": "float16", "BF16": "bfloat16", "I32": "int32",
             "U32": "uint32", "F32": "float32", "F64": "float64", "I64": "int64", "U64": "uint64"}
    dt = getattr(torch, table[name], None)
    if dt is None:
        raise LeaseError(f"this torch has no dtype for {name}")
    return dt


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
