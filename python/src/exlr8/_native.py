"""libexlr8client through ctypes: what the pure-Python lease does not do
itself (today: a half's reconstructed weights, exlr8_lease_half_weights).

The library is found from the EXLR8CLIENT_LIBRARY environment variable (a
path), else ctypes.util.find_library("exlr8client"). A NativeLease is a
second lease, of the library's own, on the same holder socket: the holder
serves several lessees, and the tensor indices are the image's, so a
TensorInfo of the pure-Python lease names the same half here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from typing import Optional

from .errors import (LeaseClosedError, LeaseCorruptionError, LeaseError, LeaseIOError, LeaseNotFoundError,
                     LeasePermissionError, LeaseUnavailableError)

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None

MEMORY_DEVICE = 1
MEMORY_HOST = 2


class _OpenOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("memory_kind", ctypes.c_uint32), ("timeout_ms", ctypes.c_uint32)]


def library() -> ctypes.CDLL:
    """The loaded libexlr8client; LeaseUnavailableError naming where it was
    looked for when it cannot be loaded or lacks exlr8_lease_half_weights."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = os.environ.get("EXLR8CLIENT_LIBRARY") or ctypes.util.find_library("exlr8client")
        if not path:
            raise LeaseUnavailableError("libexlr8client not found: set EXLR8CLIENT_LIBRARY to its path "
                                        "(e.g. /usr/lib/x86_64-linux-gnu/libexlr8client.so.1)")
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise LeaseUnavailableError(f"libexlr8client: cannot load {path}: {e}") from None
        if not hasattr(lib, "exlr8_lease_half_weights"):
            raise LeaseUnavailableError(f"libexlr8client at {path} has no exlr8_lease_half_weights (too old)")
        lib.exlr8_last_error_message.restype = ctypes.c_char_p
        lib.exlr8_last_error_message.argtypes = []
        lib.exlr8_status_name.restype = ctypes.c_char_p
        lib.exlr8_status_name.argtypes = [ctypes.c_int]
        lib.exlr8_open_options_init.restype = None
        lib.exlr8_open_options_init.argtypes = [ctypes.POINTER(_OpenOptions)]
        lib.exlr8_lease_open.restype = ctypes.c_int
        lib.exlr8_lease_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(_OpenOptions), ctypes.POINTER(ctypes.c_void_p)]
        lib.exlr8_lease_free.restype = None
        lib.exlr8_lease_free.argtypes = [ctypes.c_void_p]
        lib.exlr8_lease_half_weights.restype = ctypes.c_int
        lib.exlr8_lease_half_weights.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64,
                                                 ctypes.c_void_p]
        _lib = lib
        return lib


# exlr8_status -> this package's exceptions.
_ERRORS = {2: LeaseNotFoundError, 3: LeaseCorruptionError, 4: LeaseIOError, 6: LeaseUnavailableError,
           7: LeasePermissionError, 8: LeaseClosedError}


def _raise(lib: ctypes.CDLL, status: int, what: str) -> None:
    name = lib.exlr8_status_name(status).decode()
    message = lib.exlr8_last_error_message().decode(errors="replace")
    raise _ERRORS.get(status, LeaseError)(f"{what}: {name}: {message}")


class NativeLease:
    """A libexlr8client lease on `socket_path` (memory_kind MEMORY_HOST or
    MEMORY_DEVICE). close() lets go; so does garbage collection."""

    def __init__(self, socket_path: str, memory_kind: int, timeout: float = 30.0):
        self._lib = library()
        o = _OpenOptions()
        self._lib.exlr8_open_options_init(ctypes.byref(o))
        o.memory_kind = memory_kind
        o.timeout_ms = max(1, min(int(timeout * 1000), 0xFFFFFFFF))
        h = ctypes.c_void_p()
        s = self._lib.exlr8_lease_open(os.fsencode(socket_path), ctypes.byref(o), ctypes.byref(h))
        if s != 0:
            _raise(self._lib, s, f"libexlr8client lease on {socket_path}")
        self._handle: Optional[int] = h.value
        self.path = socket_path

    def half_weights(self, index: int, out_ptr: int, elems: int, stream: int = 0) -> None:
        """exlr8_lease_half_weights into `elems` floats at `out_ptr` (host
        memory, or device memory of the lease's GPU enqueued on `stream`)."""
        if self._handle is None:
            raise LeaseClosedError(f"libexlr8client lease on {self.path} is closed")
        s = self._lib.exlr8_lease_half_weights(self._handle, index, ctypes.c_void_p(out_ptr), elems,
                                               ctypes.c_void_p(stream or None))
        if s != 0:
            _raise(self._lib, s, f"half weights of tensor {index} from {self.path}")

    def close(self) -> None:
        h, self._handle = self._handle, None
        if h is not None:
            self._lib.exlr8_lease_free(h)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter exit
            pass
