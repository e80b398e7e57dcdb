"""A CUDA driver written in Python, for the device-memory path of
exlr8.Lease on a machine without a GPU: it stands in for exlr8._cuda's
ctypes functions (same arguments: ctypes objects by reference), backs
"device memory" with host buffers, and logs every call, so that tests see
which calls were made, in which order, with which access flags."""

import ctypes
import os

from exlr8 import _cuda

VA_BASE = 0x7F0000000000  # fake device addresses start here


class FakeDriver(_cuda.Driver):
    def __init__(self, devices, granularity=256):
        # No libcuda: every function the package binds is a method here.
        self.devices = devices  # [(uuid "GPU-...", pci bus id)]
        self.granularity = granularity
        self.calls = []
        self.imports = {}       # handle -> ctypes buffer
        self.reserved = {}      # va -> size
        self.mapped = {}        # va -> buffer
        self.ipc = {}           # 64 handle bytes -> ctypes buffer (what a holder exported)
        self.access = {}
        self.fail = {}          # call name -> CUresult to return
        self.next_va = VA_BASE
        self.next_handle = 1
        for name in ("cuInit", "cuGetErrorName", "cuGetErrorString", "cuDeviceGetCount", "cuDeviceGet",
                     "cuDeviceGetUuid", "cuDeviceGetPCIBusId", "cuDeviceGetAttribute", "cuDevicePrimaryCtxRetain",
                     "cuDevicePrimaryCtxRelease", "cuCtxPushCurrent", "cuCtxPopCurrent", "cuCtxSynchronize",
                     "cuMemcpyDtoH", "cuMemGetAllocationGranularity", "cuMemImportFromShareableHandle",
                     "cuMemAddressReserve", "cuMemAddressFree", "cuMemMap", "cuMemUnmap", "cuMemSetAccess",
                     "cuMemRelease", "cuIpcOpenMemHandle", "cuIpcCloseMemHandle"):
            setattr(self, name, self._logged(name, getattr(self, "_" + name)))

    def _logged(self, name, f):
        def call(*args):
            self.calls.append(name)
            if name in self.fail:
                return self.fail[name]
            return f(*args)
        return call

    def names(self):
        return [c for c in self.calls if c not in ("cuCtxPushCurrent", "cuCtxPopCurrent", "cuGetErrorName",
                                                    "cuGetErrorString")]

    # --- the functions, as the driver API's (pointers arrive as byref) ---
    def _cuInit(self, flags):
        return 0

    def _cuGetErrorName(self, r, p):
        p._obj.value = f"CUDA_ERROR_{r}".encode()
        return 0

    def _cuGetErrorString(self, r, p):
        p._obj.value = b"fake failure"
        return 0

    def _cuDeviceGetCount(self, pn):
        pn._obj.value = len(self.devices)
        return 0

    def _cuDeviceGet(self, pdev, i):
        if not 0 <= i < len(self.devices):
            return 101  # CUDA_ERROR_INVALID_DEVICE
        pdev._obj.value = i
        return 0

    def _cuDeviceGetUuid(self, pu, dev):
        raw = bytes.fromhex(self.devices[dev.value][0][4:].replace("-", ""))
        ctypes.memmove(ctypes.addressof(pu._obj), raw, 16)
        return 0

    def _cuDeviceGetPCIBusId(self, buf, n, dev):
        buf.value = self.devices[dev.value][1].encode()
        return 0

    def _cuDeviceGetAttribute(self, pv, attr, dev):
        pv._obj.value = 1
        return 0

    def _cuDevicePrimaryCtxRetain(self, pctx, dev):
        pctx._obj.value = 0x1000 + dev.value
        return 0

    def _cuDevicePrimaryCtxRelease(self, dev):
        return 0

    def _cuCtxPushCurrent(self, ctx):
        return 0

    def _cuCtxPopCurrent(self, pctx):
        return 0

    def _cuCtxSynchronize(self):
        return 0

    def _host(self, va):
        for base, buf in self.mapped.items():
            if base <= va < base + len(buf):
                return ctypes.addressof(buf) + (va - base), base + len(buf) - va
        return None, 0

    def _cuMemcpyDtoH(self, dst, src, n):
        addr, left = self._host(int(src.value if hasattr(src, "value") else src))
        if addr is None or n > left:
            return 700  # CUDA_ERROR_ILLEGAL_ADDRESS
        ctypes.memmove(dst, addr, n)
        return 0

    def _cuMemGetAllocationGranularity(self, pg, pprop, flag):
        assert pprop._obj.location.type == _cuda.CU_MEM_LOCATION_TYPE_DEVICE
        pg._obj.value = self.granularity
        return 0

    def _cuMemImportFromShareableHandle(self, ph, os_handle, kind):
        fd = os_handle.value
        size = os.fstat(fd).st_size
        buf = ctypes.create_string_buffer(os.pread(fd, size, 0), size)
        h = self.next_handle
        self.next_handle += 1
        self.imports[h] = buf
        ph._obj.value = h
        return 0

    def _cuMemAddressReserve(self, pptr, size, align, addr, flags):
        va = self.next_va
        self.next_va += size + (1 << 20)
        self.reserved[va] = size
        pptr._obj.value = va
        return 0

    def _cuMemAddressFree(self, ptr, size):
        self.reserved.pop(int(ptr.value if hasattr(ptr, "value") else ptr))
        return 0

    def _cuMemMap(self, ptr, size, offset, handle, flags):
        va = ptr.value
        buf = self.imports.get(handle)
        if buf is None or size != len(buf) or self.reserved.get(va) != size:
            return 1  # CUDA_ERROR_INVALID_VALUE
        self.mapped[va] = buf
        return 0

    def _cuMemUnmap(self, ptr, size):
        self.mapped.pop(int(ptr.value if hasattr(ptr, "value") else ptr))
        return 0

    def _cuMemSetAccess(self, ptr, size, pdesc, count):
        self.access[ptr.value] = pdesc._obj.flags
        return 0

    def _cuMemRelease(self, handle):
        self.imports.pop(handle)
        return 0

    def _cuIpcOpenMemHandle(self, pptr, handle, flags):
        buf = self.ipc.get(bytes(handle))
        if buf is None:
            return 400  # CUDA_ERROR_INVALID_HANDLE
        va = self.next_va
        self.next_va += len(buf) + (1 << 20)
        self.mapped[va] = buf
        pptr._obj.value = va
        return 0

    def _cuIpcCloseMemHandle(self, ptr):
        self.mapped.pop(ptr)
        return 0
