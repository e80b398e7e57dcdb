"""A small writer of the IMAGE.md layout (tables file, image header, offset
table), for tests: synthesizes tables of any size without a holder."""

import struct

from exlr8.tables import (ABSENT, NO_EXPERT, NO_HALF, NO_LAYER, NO_NAME, NO_PROJ, SHARED_EXPERT, DTYPE_SIZES)

F16, BF16, F32, U8 = 7, 8, 11, 1
ENTRY = struct.Struct("<3Q2H8B7I")


def align(v, a):
    return (v + a - 1) // a * a


class Builder:
    """Lays out regions like ImageLayoutBuilder: halves, then vectors, then
    dense, then the offset table, each region on a 256-byte boundary."""

    def __init__(self, layers, experts, halves, tp=1, rank=0, commit="c0ffee"):
        self.layers, self.experts, self.halves = layers, experts, halves
        self.tp, self.rank, self.commit = tp, rank, commit
        self.entries = []  # dicts
        self.checks = []   # (digest, [(tensor, offset_in_region, length)])

    def add_half(self, layer, expert, proj, half, k=2, hidden=128, vdtype=F16, bdtype=F32, slice_elems=128,
                 block_elems=1, digest=0):
        tb = 16 * k * hidden
        length = tb + slice_elems * DTYPE_SIZES[vdtype] + block_elems * DTYPE_SIZES[bdtype]
        self.entries.append(dict(sec=0, length=length, xxh=digest, layer=layer,
                                 expert=SHARED_EXPERT if expert == "shared" else expert, proj=proj, half=half,
                                 kind=1, fmt=k, dtype=vdtype, rank=3, k=k, b35=bdtype,
                                 shape=(tb, slice_elems, block_elems, 0), name=None, out=0, inp=0))
        self.checks.append((digest, [(len(self.entries) - 1, 0, length)]))
        return len(self.entries) - 1

    def add_signs(self, layer, out, n=128, dtype=F16, digest=0):
        self.entries.append(dict(sec=1, length=n * DTYPE_SIZES[dtype], xxh=digest, layer=layer,
                                 expert=NO_EXPERT, proj=NO_PROJ, half=NO_HALF, kind=3 if out else 2, fmt=0,
                                 dtype=dtype, rank=1, k=0, b35=0, shape=(n, 0, 0, 0), name=None, out=0, inp=0))
        return len(self.entries) - 1

    def add_plain(self, name, shape, dtype=F32, layer=None, digest=0, dense_format=0, out=0, inp=0):
        n = DTYPE_SIZES[dtype]
        for d in shape:
            n *= d
        self.entries.append(dict(sec=2, length=n, xxh=digest, layer=NO_LAYER if layer is None else layer,
                                 expert=NO_EXPERT, proj=NO_PROJ, half=NO_HALF, kind=4 if dense_format else 5,
                                 fmt=dense_format, dtype=dtype, rank=len(shape), k=0, b35=0,
                                 shape=tuple(shape) + (0,) * (4 - len(shape)), name=name, out=out, inp=inp))
        return len(self.entries) - 1

    def layout(self):
        """Offsets for every region; returns (sections, allocation bytes)."""
        at = 4096
        sections = []
        for sec in range(3):
            start = at
            end = start
            for e in self.entries:
                if e["sec"] == sec:
                    e["offset"] = at
                    end = at + e["length"]
                    at = align(end, 256)
            sections.append((start, end - start))
        table_bytes = self.layers * (self.experts + 1) * 3 * self.halves * 8
        sections.append((at, table_bytes))
        self.sections = sections
        self.allocation = align(at + table_bytes, 256)
        return sections, self.allocation

    def offset_table(self):
        E1 = self.experts + 1
        table = [ABSENT] * (self.layers * E1 * 3 * self.halves)
        for e in self.entries:
            if e["kind"] == 1:
                ex = self.experts if e["expert"] == SHARED_EXPERT else e["expert"]
                table[((e["layer"] * E1 + ex) * 3 + e["proj"]) * self.halves + e["half"]] = e["offset"]
        return struct.pack(f"<{len(table)}Q", *table)

    def header(self):
        h = bytearray(4096)
        h[0:8] = b"EXLR8IMG"
        struct.pack_into("<IIQ", h, 8, 1, 4096, self.allocation)
        for i, (o, n) in enumerate(self.sections):
            struct.pack_into("<QQ", h, 24 + 16 * i, o, n)
        struct.pack_into("<5I", h, 88, self.tp, self.rank, self.layers, self.experts, self.halves)
        c = self.commit.encode()
        h[128:128 + len(c)] = c
        return bytes(h)

    def tables(self):
        if not hasattr(self, "sections"):
            self.layout()
        pool = bytearray()
        out = bytearray()
        for e in self.entries:
            if e["name"] is None:
                name_at = NO_NAME
            else:
                name_at = len(pool)
                pool += e["name"].encode() + b"\0"
            out += ENTRY.pack(e["offset"], e["length"], e["xxh"], e["layer"], e["expert"], e["proj"], e["half"],
                              e["kind"], e["fmt"], e["dtype"], e["rank"], e["k"], e["b35"], *e["shape"], name_at,
                              e["out"], e["inp"])
        checks = bytearray()
        for digest, segs in self.checks:
            c = bytearray(80)
            struct.pack_into("<QI", c, 0, digest, len(segs))
            for s, (ti, o, n) in enumerate(segs):
                struct.pack_into("<QQ", c, 16 + 16 * s, self.entries[ti]["offset"] + o, n)
            checks += c
        n_t, n_c = len(self.entries), len(self.checks)
        tensors_at = 128
        checks_at = tensors_at + 64 * n_t
        strings_at = checks_at + 80 * n_c
        offsets_at = align(strings_at + len(pool), 8)
        table = self.offset_table()
        head = bytearray(128)
        head[0:8] = b"EXLR8TBL"
        struct.pack_into("<IIQ3I", head, 8, 1, 128, self.allocation, self.layers, self.experts, self.halves)
        struct.pack_into("<8Q", head, 40, n_t, tensors_at, n_c, checks_at, strings_at, len(pool), offsets_at,
                         len(table))
        blob = bytes(head) + bytes(out) + bytes(checks) + bytes(pool)
        blob += b"\0" * (offsets_at - len(blob)) + table
        return blob

    def image(self, fill=None):
        """The whole image: header, regions (``fill(entry_index, length)`` or
        zeros), offset table."""
        img = bytearray(self.allocation)
        img[0:4096] = self.header()
        if fill:
            for i, e in enumerate(self.entries):
                img[e["offset"]:e["offset"] + e["length"]] = fill(i, e["length"])
        o, n = self.sections[3]
        img[o:o + n] = self.offset_table()
        return bytes(img)


def glm_scale(layers=75, experts=256, halves=16, tp=4, rank=0, dense=1500):
    """A GLM-5.3-sized rank: TP 4 rank 0 owns a quarter of the routed experts'
    halves and every shared one (~230,000 half records)."""
    b = Builder(layers, experts, halves, tp=tp, rank=rank)
    for layer in range(layers):
        for e in list(range(rank, experts, tp)) + ["shared"]:
            for p in range(3):
                for h in range(halves):
                    b.add_half(layer, e, p, h, k=2, hidden=6, digest=layer * 7919 + h)
        b.add_signs(layer, False)
        b.add_signs(layer, True)
    for i in range(dense):
        b.add_plain(f"layers.{i % 78}.t{i}", (4, 8), layer=i % 78)
    return b
