"""A lease holder written in the test: serves any bytes and descriptors on
a Unix socket the way PROTOCOL.md says (the line's first byte carries the
descriptors), so that tests can send what a real holder never would."""

import json
import os
import socket
import threading
import time

import imagewriter

F_ADD_SEALS = 1033
SEAL_ALL = 0x1 | 0x2 | 0x4 | 0x8  # SEAL, SHRINK, GROW, WRITE


def memfd(data: bytes, size: int = None, seal: bool = True, name: str = "exlr8-test", more=()) -> int:
    """A sealed memfd holding ``data`` (``size`` bytes, sparse past ``data``)
    and each (offset, bytes) of ``more``."""
    import fcntl
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, len(data) if size is None else size)
    if data:
        os.pwrite(fd, data, 0)
    for at, chunk in more:
        os.pwrite(fd, chunk, at)
    if seal:
        fcntl.fcntl(fd, F_ADD_SEALS, SEAL_ALL)
    return fd


def description(b: imagewriter.Builder, tables_bytes: int, n_strings: int, deadline: int = 7, **over) -> dict:
    d = {
        "version": 2, "repo": "exlr8/test", "commit": b.commit, "manifest": "home", "tp": b.tp, "rank": b.rank,
        "memory": {"kind": "host", "allocations": [{"bytes": b.allocation, "handle": "fd"}]},
        "image": {"allocation": 0, "header_offset": 0, "bytes": b.allocation, "offset_table": b.sections[3][0],
                  "offset_table_bytes": b.sections[3][1], "layers": b.layers, "experts": b.experts,
                  "halves": b.halves},
        "tables": {"bytes": tables_bytes, "tensors": len(b.entries), "checks": len(b.checks), "strings": n_strings},
        "proof": {"commit": b.commit, "hashed": {"regions": len(b.checks), "bytes": 0, "mismatches": 0},
                  "decoded": {"halves": 0, "of": 0, "seed": 0, "every_layer_width_projection": False,
                              "tiles_bit_exact": True, "max_block_error": 0},
                  "dense_decoded": {"tensors": 0, "mismatches": 0},
                  "seconds": {"read": 0.5, "upload": 0, "hash": 0.1, "decode": 0}, "mismatch": None},
        "release_deadline_s": deadline,
    }
    d.update(over)
    return d


class Served:
    """An image, its tables and their description, ready to serve."""

    def __init__(self, b: imagewriter.Builder, fill=None, sparse=False):
        b.layout()
        self.builder = b
        self.tables = b.tables()
        if sparse:
            self.image_fd = memfd(b.header(), b.allocation, more=[(b.sections[3][0], b.offset_table())])
        else:
            self.image = b.image(fill)
            self.image_fd = memfd(self.image)
        self.tables_fd = memfd(self.tables)
        strings = sum(len(e["name"].encode()) + 1 for e in b.entries if e["name"] is not None)
        self.description = description(b, len(self.tables), strings)

    def line(self, **over) -> bytes:
        d = dict(self.description)
        d.update(over)
        return json.dumps(d, separators=(",", ":")).encode()

    def close(self):
        for fd in (self.image_fd, self.tables_fd):
            try:
                os.close(fd)
            except OSError:
                pass


class FakeHolder:
    """Accepts connections on ``path`` in a thread; to each sends ``line``
    (bytes, a newline added unless ``newline`` is False) with ``fds`` on its
    first byte, then ``after``, then closes if ``close_after``, else reads
    until the lessee closes (``eof`` is set then, ``on_eof`` called first)."""

    def __init__(self, path, line: bytes, fds=(), after: bytes = b"", close_after=False, newline=True,
                 split_fds=False, on_eof=None):
        self.path = str(path)
        self.line = line + (b"\n" if newline else b"")
        self.fds = list(fds)
        self.after = after
        self.close_after = close_after
        self.split_fds = split_fds
        self.on_eof = on_eof
        self.eof = threading.Event()
        self.conns = []
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(8)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            c, _ = self.srv.accept()
        except OSError:
            return
        self.conns.append(c)
        try:
            if self.split_fds:  # descriptors on a later byte: refused by the lessee
                c.sendall(self.line[:1])
                time.sleep(0.3)  # the lessee reads the first byte alone
                socket.send_fds(c, [self.line[1:2]], self.fds)
                c.sendall(self.line[2:])
            elif self.fds:
                socket.send_fds(c, [self.line[:1]], self.fds)
                c.sendall(self.line[1:])
            else:
                c.sendall(self.line)
            if self.after:
                c.sendall(self.after)
            if self.close_after:
                c.close()
                return
            while c.recv(4096):
                pass
        except OSError:
            pass
        if self.on_eof:
            self.on_eof()
        self.eof.set()

    def send(self, data: bytes):
        self.conns[0].sendall(data)

    def close(self):
        self.srv.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
        try:
            os.unlink(self.path)
        except OSError:
            pass
