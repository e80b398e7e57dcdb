"""The CUDA driver API through ctypes (libcuda.so.1), for leases of device
memory: find the holder's GPU by UUID, import its allocation read-only
(a VMM POSIX file descriptor, or a legacy "ipc:" handle), copy bytes back
for the checks, release. No CUDA toolkit, no torch, no compiled code: only
the driver. Loaded on first use, so that host leases and the REST client
work where there is no GPU.

Every call runs with the device's primary context current (the one torch
and the CUDA runtime use), pushed for the call and popped after.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Optional, Tuple

from .errors import CudaError, LeaseNotFoundError, LeaseUnavailableError

CUDA_SUCCESS = 0
CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102
CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READ = 1
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1

CUdeviceptr = ctypes.c_uint64
CUdevice = ctypes.c_int
CUcontext = ctypes.c_void_p
CUresult = ctypes.c_int


class CUuuid(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * 16)]


class CUmemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class CUmemAllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", CUmemLocation),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class CUmemAccessDesc(ctypes.Structure):
    _fields_ = [("location", CUmemLocation), ("flags", ctypes.c_int)]


class CUipcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]

    @classmethod
    def from_hex(cls, hex_digits: str) -> "CUipcMemHandle":
        """The 64 bytes of an "ipc:<128 hex>" handle (c_char fields would stop at a NUL)."""
        return cls.from_buffer_copy(bytes.fromhex(hex_digits))


_lock = threading.Lock()
_driver: Optional["Driver"] = None


class Driver:
    """libcuda.so.1's functions this package calls, with cuInit done."""

    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise LeaseUnavailableError(f"no CUDA driver: cannot load libcuda.so.1 ({e})") from None
        P, S, U64 = ctypes.POINTER, ctypes.c_size_t, ctypes.c_ulonglong
        self._bind("cuInit", [ctypes.c_uint])
        self._bind("cuGetErrorName", [CUresult, P(ctypes.c_char_p)])
        self._bind("cuGetErrorString", [CUresult, P(ctypes.c_char_p)])
        self._bind("cuDeviceGetCount", [P(ctypes.c_int)])
        self._bind("cuDeviceGet", [P(CUdevice), ctypes.c_int])
        self._bind("cuDeviceGetUuid", [P(CUuuid), CUdevice], ("cuDeviceGetUuid_v2", "cuDeviceGetUuid"))
        self._bind("cuDeviceGetPCIBusId", [ctypes.c_char_p, ctypes.c_int, CUdevice])
        self._bind("cuDeviceGetAttribute", [P(ctypes.c_int), ctypes.c_int, CUdevice])
        self._bind("cuDevicePrimaryCtxRetain", [P(CUcontext), CUdevice])
        self._bind("cuDevicePrimaryCtxRelease", [CUdevice], ("cuDevicePrimaryCtxRelease_v2",
                                                             "cuDevicePrimaryCtxRelease"))
        self._bind("cuCtxPushCurrent", [CUcontext], ("cuCtxPushCurrent_v2", "cuCtxPushCurrent"))
        self._bind("cuCtxPopCurrent", [P(CUcontext)], ("cuCtxPopCurrent_v2", "cuCtxPopCurrent"))
        self._bind("cuCtxSynchronize", [])
        self._bind("cuMemcpyDtoH", [ctypes.c_void_p, CUdeviceptr, S], ("cuMemcpyDtoH_v2", "cuMemcpyDtoH"))
        self._bind("cuMemGetAllocationGranularity", [P(S), P(CUmemAllocationProp), ctypes.c_int])
        self._bind("cuMemImportFromShareableHandle", [P(U64), ctypes.c_void_p, ctypes.c_int])
        self._bind("cuMemAddressReserve", [P(CUdeviceptr), S, S, CUdeviceptr, U64])
        self._bind("cuMemAddressFree", [CUdeviceptr, S])
        self._bind("cuMemMap", [CUdeviceptr, S, S, U64, U64])
        self._bind("cuMemUnmap", [CUdeviceptr, S])
        self._bind("cuMemSetAccess", [CUdeviceptr, S, P(CUmemAccessDesc), S])
        self._bind("cuMemRelease", [U64])
        self._bind("cuIpcOpenMemHandle", [P(CUdeviceptr), CUipcMemHandle, ctypes.c_uint],
                   ("cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"))
        self._bind("cuIpcCloseMemHandle", [CUdeviceptr])
        r = self.cuInit(0)
        if r != CUDA_SUCCESS:
            raise LeaseUnavailableError(f"no usable GPU: cuInit failed: {self.error_text(r)}")

    def _bind(self, name: str, argtypes, symbols: Tuple[str, ...] = ()) -> None:
        for sym in symbols or (name,):
            f = getattr(self.lib, sym, None)
            if f is not None:
                f.argtypes = argtypes
                f.restype = CUresult
                setattr(self, name, f)
                return
        setattr(self, name, None)

    def error_text(self, r: int) -> str:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        if self.cuGetErrorName is not None and self.cuGetErrorName(r, ctypes.byref(name)) == 0 and name.value:
            s = name.value.decode()
            if self.cuGetErrorString(r, ctypes.byref(text)) == 0 and text.value:
                s += ": " + text.value.decode()
            return s
        return f"CUresult {r}"

    def check(self, r: int, call: str, what: str = "") -> None:
        if r != CUDA_SUCCESS:
            raise CudaError(f"{what + ': ' if what else ''}{call} failed: {self.error_text(r)}", call, r)

    def need(self, name: str):
        f = getattr(self, name)
        if f is None:
            raise LeaseUnavailableError(f"the CUDA driver has no {name} (too old for this lease)")
        return f


def driver() -> Driver:
    global _driver
    with _lock:
        if _driver is None:
            _driver = Driver()
        return _driver


def format_uuid(b: bytes) -> str:
    h = bytes(b).hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def devices() -> list:
    """[(ordinal, "GPU-...", pci bus id)] of the devices this process sees."""
    drv = driver()
    n = ctypes.c_int()
    drv.check(drv.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
    out = []
    for i in range(n.value):
        dev = CUdevice()
        drv.check(drv.cuDeviceGet(ctypes.byref(dev), i), "cuDeviceGet")
        u = CUuuid()
        drv.check(drv.need("cuDeviceGetUuid")(ctypes.byref(u), dev), "cuDeviceGetUuid")
        bus = ctypes.create_string_buffer(32)
        drv.check(drv.cuDeviceGetPCIBusId(bus, 32, dev), "cuDeviceGetPCIBusId")
        out.append((i, format_uuid(bytes(u.bytes)), bus.value.decode()))
    return out


def find_device(uuid: str, pci_bus_id: str) -> int:
    """This process's ordinal of the GPU with that UUID (whatever
    CUDA_VISIBLE_DEVICES says). LeaseUnavailableError when no GPU is
    visible, LeaseNotFoundError when it is not among them."""
    seen = devices()
    if not seen:
        raise LeaseUnavailableError(f"no CUDA device is visible; the lease's GPU is {uuid} at {pci_bus_id}")
    for ordinal, u, _bus in seen:
        if u.lower() == uuid.lower():
            return ordinal
    raise LeaseNotFoundError(f"no visible CUDA device has UUID {uuid} (PCI {pci_bus_id}); visible: " +
                             ", ".join(f"{o}: {u} ({b})" for o, u, b in seen))


class _Current:
    """The device's primary context pushed for a block."""

    def __init__(self, img: "DeviceImage"):
        self.img = img

    def __enter__(self):
        self.img.drv.check(self.img.drv.cuCtxPushCurrent(self.img.ctx), "cuCtxPushCurrent")

    def __exit__(self, *exc):
        old = CUcontext()
        self.img.drv.cuCtxPopCurrent(ctypes.byref(old))


class DeviceImage:
    """An imported allocation on one device: base pointer, and release()."""

    def __init__(self):
        self.drv: Optional[Driver] = None
        self.ordinal = -1
        self.dev = CUdevice()
        self.ctx = CUcontext()
        self.ctx_retained = False
        self.ptr = 0           # the allocation's address
        self.size = 0
        self.handle = None     # a VMM import's handle
        self.ipc = False
        self.mapped = False
        self.base = 0          # the image's address (ptr + header_offset)

    @classmethod
    def open(cls, d, fd: Optional[int], source: str) -> "DeviceImage":
        """Imports description ``d``'s image allocation (``fd`` for a "fd"
        handle) on the GPU named by its UUID, read-only."""
        img = cls()
        img.drv = drv = driver()
        gpu = d.device
        img.ordinal = find_device(gpu.uuid, gpu.pci_bus_id)
        drv.check(drv.cuDeviceGet(ctypes.byref(img.dev), img.ordinal), "cuDeviceGet")
        drv.check(drv.cuDevicePrimaryCtxRetain(ctypes.byref(img.ctx), img.dev), "cuDevicePrimaryCtxRetain")
        img.ctx_retained = True
        a = d.allocations[d.image.allocation]
        what = f"lease from {source}: allocation {d.image.allocation} ({a.bytes} bytes)"
        try:
            with _Current(img):
                if a.is_fd:
                    img._import_fd(fd, a.bytes, what)
                else:
                    img._open_ipc(a.handle, a.bytes, what)
        except BaseException:
            img.release()
            raise
        img.base = img.ptr + d.image.header_offset
        return img

    def _import_fd(self, fd: int, nbytes: int, what: str) -> None:
        drv = self.drv
        for attr, name in ((CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, "virtual memory management"),
                           (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                            "POSIX file descriptor handles")):
            v = ctypes.c_int()
            drv.check(drv.cuDeviceGetAttribute(ctypes.byref(v), attr, self.dev), "cuDeviceGetAttribute", what)
            if not v.value:
                raise LeaseUnavailableError(f"{what}: CUDA device {self.ordinal} has no {name}")
        prop = CUmemAllocationProp()
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = self.dev.value
        gran = ctypes.c_size_t()
        drv.check(drv.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop),
                                                    CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                  "cuMemGetAllocationGranularity", what)
        if gran.value == 0 or nbytes % gran.value:
            raise CudaError(f"{what}: not a multiple of the allocation granularity {gran.value}")
        handle = ctypes.c_ulonglong()
        drv.check(drv.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd),
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                  "cuMemImportFromShareableHandle", what)
        self.handle = handle.value
        ptr = CUdeviceptr()
        drv.check(drv.cuMemAddressReserve(ctypes.byref(ptr), nbytes, gran.value, 0, 0), "cuMemAddressReserve", what)
        self.ptr, self.size = ptr.value, nbytes
        r = drv.cuMemMap(ptr, nbytes, 0, self.handle, 0)
        if r != CUDA_SUCCESS:
            drv.cuMemAddressFree(ptr, nbytes)
            self.ptr = self.size = 0
            drv.check(r, "cuMemMap", what + " (not the exported allocation's size?)")
        desc = CUmemAccessDesc()
        desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE
        desc.location.id = self.dev.value
        desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READ
        self.mapped = True
        drv.check(drv.cuMemSetAccess(ptr, nbytes, ctypes.byref(desc), 1), "cuMemSetAccess", what)

    def _open_ipc(self, handle: str, nbytes: int, what: str) -> None:
        drv = self.drv
        h = CUipcMemHandle.from_hex(handle[4:])
        ptr = CUdeviceptr()
        drv.check(drv.need("cuIpcOpenMemHandle")(ctypes.byref(ptr), h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                  "cuIpcOpenMemHandle", what)
        self.ptr, self.size, self.ipc = ptr.value, nbytes, True

    def copy_to_host(self, offset: int, nbytes: int) -> bytes:
        """``nbytes`` from the image's ``offset`` (cuMemcpyDtoH, synchronous)."""
        buf = ctypes.create_string_buffer(nbytes)
        if nbytes:
            with _Current(self):
                self.drv.check(self.drv.cuMemcpyDtoH(buf, self.base + offset, nbytes), "cuMemcpyDtoH")
        return buf.raw

    def release(self) -> None:
        """Synchronizes the device's primary context (work on the image
        finishes first), then unmaps, releases the handle and frees the
        range (or closes the IPC mapping), then drops the context. Never
        raises for a driver failure during release: it continues and
        reports the first as a CudaError afterwards."""
        drv = self.drv
        if drv is None:
            return
        first = []

        def note(r, call):
            if r != CUDA_SUCCESS and not first:
                first.append(CudaError(f"{call} failed: {drv.error_text(r)}", call, r))
        if self.ctx_retained:
            pushed = drv.cuCtxPushCurrent(self.ctx) == CUDA_SUCCESS
            try:
                if self.ptr or self.handle is not None:
                    note(drv.cuCtxSynchronize(), "cuCtxSynchronize")
                if self.ipc and self.ptr:
                    note(drv.cuIpcCloseMemHandle(self.ptr), "cuIpcCloseMemHandle")
                elif self.ptr:
                    if getattr(self, "mapped", False):
                        note(drv.cuMemUnmap(self.ptr, self.size), "cuMemUnmap")
                if self.handle is not None:
                    note(drv.cuMemRelease(self.handle), "cuMemRelease")
                if self.ptr and not self.ipc:
                    note(drv.cuMemAddressFree(self.ptr, self.size), "cuMemAddressFree")
            finally:
                if pushed:
                    old = CUcontext()
                    drv.cuCtxPopCurrent(ctypes.byref(old))
            note(drv.cuDevicePrimaryCtxRelease(self.dev), "cuDevicePrimaryCtxRelease")
        self.ptr = self.size = 0
        self.handle = None
        self.ctx_retained = False
        self.drv = None
        if first:
            raise first[0]


class CudaArray:
    """A device array: ``__cuda_array_interface__`` version 3 over ``shape``
    elements of ``typestr`` at ``ptr``, flagged read-only unless
    ``readonly`` is False (torch refuses the flag: Lease.torch() passes
    False, and the memory stays read-only underneath). Keeps ``owner``
    (the Lease) referenced; valid until the lease is closed."""

    def __init__(self, ptr: int, shape, typestr: str, owner: Any, readonly: bool = True):
        self.ptr = ptr
        self.shape = tuple(shape)
        self.typestr = typestr
        self.owner = owner
        self.readonly = readonly

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.typestr, "data": (self.ptr, self.readonly), "version": 3,
                "strides": None, "stream": None}

    def __repr__(self) -> str:
        flag = " (read-only)" if self.readonly else ""
        return f"<exlr8 CudaArray {self.typestr}{list(self.shape)} at {self.ptr:#x}{flag}>"
