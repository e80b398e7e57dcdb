"""The rank image's header and tables (schema/lease/IMAGE.md), parsed
strictly, the same rules as client/lease/image_tables.cpp: nothing is used
before every count, offset and length is checked, and each refusal is a
TablesError naming the table, the entry's index, the field and its byte
offset in the parsed bytes.

Speed: a GLM-5.3 rank has ~234,000 tensor entries and as many check
entries. Entries are unpacked with struct.iter_unpack, each half record is
checked by one expression (the message is worked out only when it fails),
the offset table is compared as an array, and TensorInfo objects are made
only when asked for (``Tables.tensors`` is a lazy sequence).

About 850 lines, like its C++ twin: each field's rule sits next to the code
that unpacks it, so a rule and the bytes it guards are read together.
"""

from __future__ import annotations

import array
import bisect
import itertools
import re
import operator
import struct
import sys
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple, Union

from .errors import TablesError

IMAGE_MAGIC = b"EXLR8IMG"
TABLES_MAGIC = b"EXLR8TBL"
LAYOUT_VERSION = 1
TABLES_VERSION = 1
IMAGE_HEADER_BYTES = 4096
TABLES_HEADER_BYTES = 128
TENSOR_ENTRY_BYTES = 64
CHECK_ENTRY_BYTES = 80
ALIGNMENT = 256
ABSENT = 0xFFFFFFFFFFFFFFFF
NO_LAYER = 0xFFFF
SHARED_EXPERT = 0xFFFE
NO_EXPERT = 0xFFFF
NO_PROJ = 0xFF
NO_HALF = 0xFF
NO_NAME = 0xFFFFFFFF
MAX_LAYERS = 0xFFFE
MAX_EXPERTS = 0xFFFD
MAX_HALVES = 0xFE
MAX_TENSORS = 1 << 24
MAX_CHECKS = 1 << 25
MAX_STRING_BYTES = 1 << 28
MAX_SEGMENTS = 4
DENSE_FORMATS = 7  # spec 10.3: 1 TRELLIS .. 7 FP32
TRELLIS = 1

# Tensor entry byte 30.
KIND_NAMES = {1: "half", 2: "signs.in", 3: "signs.out", 4: "dense", 5: "plain"}
KIND_MESSAGES = {1: "half record", 2: "signs.in", 3: "signs.out", 4: "dense data", 5: "plain tensor"}
PROJ_NAMES = ("gate", "up", "down")
# exlr8's DType numbering (IMAGE.md): name, element bytes.
DTYPES = (("BOOL", 1), ("U8", 1), ("I8", 1), ("F8_E4M3", 1), ("F8_E5M2", 1), ("I16", 2), ("U16", 2),
          ("F16", 2), ("BF16", 2), ("I32", 4), ("U32", 4), ("F32", 4), ("F64", 8), ("I64", 8), ("U64", 8))
DTYPE_NAMES = tuple(n for n, _ in DTYPES)
DTYPE_SIZES = tuple(s for _, s in DTYPES)
FLOAT_VECTOR = frozenset((7, 8, 11))  # F16, BF16, F32
DENSE_FORMAT_NAMES = {1: "TRELLIS", 2: "INT4", 3: "MXFP8", 4: "FP8_BLOCK", 5: "FP8_ROW", 6: "BF16", 7: "FP32"}
# A plain tensor's format byte (IMAGE.md "Plain tensor formats"): 0 for an
# EXLR8 plain tensor stored as is; an LVQ5 fileset's parts carry their
# record's format (QUANT: k = bits, inp = group; TETRA48/INT4G128: out,
# inp = the matrix's d_out, d_in).
PLAIN_FORMAT_NAMES = {0: "STORED", 1: "TETRA48", 2: "INT4G128", 3: "F16", 4: "QUANT"}


def _plain_format_name(fmt: int, k: int, inp: int) -> str:
    return f"Q{k}G{inp}" if fmt == 4 else PLAIN_FORMAT_NAMES[fmt]

_TENSOR = struct.Struct("<3Q2H8B7I")
_CHECK = struct.Struct("<QII8Q")
# Bytes 30-63 of each tensor entry (kind .. inp).
_CLASS_BYTES = re.compile(b".{30}(.{34})", re.S)

assert _TENSOR.size == TENSOR_ENTRY_BYTES and _CHECK.size == CHECK_ENTRY_BYTES


@dataclass(frozen=True)
class ImageHeader:
    """The image's 4096-byte header (section 0)."""
    allocation_bytes: int
    halves: Tuple[int, int]  # (offset, bytes) of each section
    vectors: Tuple[int, int]
    dense: Tuple[int, int]
    offset_table: Tuple[int, int]
    tp: int
    rank: int
    layers: int
    experts: int
    halves_per_proj: int
    commit: str


@dataclass(frozen=True)
class TensorInfo:
    """One region of the image (a 64-byte tensor entry).

    kind: "half" (a half record: trellis bytes, then its vector slice, then
    its block row), "signs.in", "signs.out", "dense" (dense data) or "plain".
    layer/expert/proj/half: the identity of a half record (expert an int or
    "shared", proj "gate"/"up"/"down"); layer also for signs and a dense
    layer file's tensors; None where unused. dtype: the elements' ("F16", ...;
    a half record's vectors'). shape: the stored shape (a half record's is
    (trellis bytes, slice elements, block row elements)). offset/length: the
    bytes [offset, offset + length) from the image's base. xxh64: the
    region's digest as staged. format: dense data's format name
    ("TRELLIS", ...), an LVQ5 plain tensor's ("TETRA48", "INT4G128", "F16",
    "Q4G64"), None otherwise; k: trellis width (0 where none; Q*: bits);
    block_dtype: a half record's block row's dtype; side/out/inp: dense
    data's spec 10.2 fields.
    """
    index: int
    name: Optional[str]
    kind: str
    layer: Optional[int]
    expert: Union[int, str, None]
    proj: Optional[str]
    half: Optional[int]
    dtype: str
    shape: Tuple[int, ...]
    offset: int
    length: int
    xxh64: int
    k: int = 0
    format: Optional[str] = None
    block_dtype: Optional[str] = None
    side: int = 0
    out: int = 0
    inp: int = 0

    def what(self) -> str:
        """"L3 e7 up h2 K4" / "L3 shared gate h0 K3" / "L3 signs.in" / the name."""
        if self.kind == "half":
            e = "shared" if self.expert == "shared" else f"e{self.expert}"
            return f"L{self.layer} {e} {self.proj} h{self.half} K{self.k}"
        if self.kind in ("signs.in", "signs.out"):
            return f"L{self.layer} {self.kind}"
        return repr(self.name)


@dataclass(frozen=True)
class Check:
    """An 80-byte check entry: XXH64 (seed 0) of the segments hashed in order."""
    digest: int
    segments: Tuple[Tuple[int, int], ...]  # (offset, length) from the image's base


def _herr(field: str, at: int, what: str) -> TablesError:
    return TablesError(f"image header: '{field}' at byte {at}: {what}", "image header", None, field, at)


def _nonzero(b, lo: int, hi: int) -> Optional[int]:
    chunk = bytes(b[lo:hi])
    s = chunk.lstrip(b"\0")
    return None if not s else hi - len(s)


def parse_image_header(b) -> ImageHeader:
    """The image's first 4096 bytes (``ParseImageHeader``)."""
    b = memoryview(b).cast("B") if not isinstance(b, (bytes, bytearray)) else b
    if len(b) < IMAGE_HEADER_BYTES:
        raise TablesError(f"image header: {len(b)} bytes, expected at least {IMAGE_HEADER_BYTES}",
                          "image header", None, "", 0)
    b = bytes(b[:IMAGE_HEADER_BYTES])
    if b[:8] != IMAGE_MAGIC:
        raise _herr("magic", 0, 'not "EXLR8IMG"')
    version, hbytes, alloc = struct.unpack_from("<IIQ", b, 8)
    if version != LAYOUT_VERSION:
        raise _herr("version", 8, f"layout version {version} is unknown (this reader knows {LAYOUT_VERSION})")
    if hbytes != IMAGE_HEADER_BYTES:
        raise _herr("header_bytes", 12, f"{hbytes}, expected {IMAGE_HEADER_BYTES}")
    if alloc < IMAGE_HEADER_BYTES or alloc % ALIGNMENT:
        raise _herr("allocation_bytes", 16, f"{alloc} is not a multiple of 256 of at least {IMAGE_HEADER_BYTES}")
    sections = []
    end = IMAGE_HEADER_BYTES
    for i, name in enumerate(("halves", "vectors", "dense", "offset_table")):
        at = 24 + 16 * i
        off, n = struct.unpack_from("<QQ", b, at)
        if off % ALIGNMENT:
            raise _herr(name + ".offset", at, f"{off} is not a multiple of 256")
        if off < end:
            raise _herr(name + ".offset", at, f"{off} lies before the end of the previous part ({end})")
        if off + n > alloc:
            raise _herr(name + ".bytes", at + 8, f"{off} + {n} lies past the allocation of {alloc} bytes")
        end = off + n
        sections.append((off, n))
    tp, rank, layers, experts, halves = struct.unpack_from("<5I", b, 88)
    if tp == 0 or tp > 2**31 - 1:
        raise _herr("tp", 88, f"{tp} is not in [1, 2^31)")
    if rank >= tp:
        raise _herr("rank", 92, f"{rank} is not below tp {tp}")
    if layers > MAX_LAYERS:
        raise _herr("layers", 96, f"{layers} > {MAX_LAYERS}")
    if experts > MAX_EXPERTS:
        raise _herr("experts", 100, f"{experts} > {MAX_EXPERTS}")
    if halves > MAX_HALVES:
        raise _herr("halves", 104, f"{halves} > {MAX_HALVES}")
    want = layers * (experts + 1) * 3 * halves * 8
    if sections[3][1] != want:
        raise _herr("offset_table.bytes", 80,
                    f"{sections[3][1]}, expected layers x (experts + 1) x 3 x halves x 8 = {want}")
    nz = _nonzero(b, 108, 128)
    if nz is not None:
        raise _herr("reserved", nz, "not zero")
    nul = b.find(b"\0", 128, 256)
    if nul < 0:
        raise _herr("commit", 128, "no NUL within 128 bytes")
    for i in range(128, nul):
        if not 0x20 <= b[i] <= 0x7E:
            raise _herr("commit", i, f"byte {b[i]:#x} is not printable ASCII")
    nz = _nonzero(b, nul, 256)
    if nz is not None:
        raise _herr("commit", nz, "a byte after the commit's NUL is not zero")
    nz = _nonzero(b, 256, IMAGE_HEADER_BYTES)
    if nz is not None:
        raise _herr("reserved", nz, "not zero")
    return ImageHeader(alloc, sections[0], sections[1], sections[2], sections[3], tp, rank, layers, experts,
                       halves, b[128:nul].decode("ascii"))


def _make_info(e: tuple, i: int, name: Optional[str]) -> TensorInfo:
    (off, length, xx, layer, expert, proj, half, kind, fmt, dtype, rank, k, b35,
     s0, s1, s2, s3, _name, out, inp) = e
    shape = (s0, s1, s2, s3)[:rank]
    if kind == 1:
        return TensorInfo(i, None, "half", layer, "shared" if expert == SHARED_EXPERT else expert,
                          PROJ_NAMES[proj], half, DTYPE_NAMES[dtype], shape, off, length, xx, k=k,
                          block_dtype=DTYPE_NAMES[b35])
    return TensorInfo(i, name, KIND_NAMES[kind], None if layer == NO_LAYER else layer, None,
                      None, None, DTYPE_NAMES[dtype], shape, off, length, xx, k=k,
                      format=DENSE_FORMAT_NAMES.get(fmt) if kind == 4 else
                      (_plain_format_name(fmt, k, inp) if kind == 5 and fmt != 0 else None),
                      side=b35, out=out, inp=inp)


class _TensorList(Sequence):
    """Tables.tensors: TensorInfo made on first access, then kept."""

    def __init__(self, tables: "Tables"):
        self._t = tables
        self._made: List[Optional[TensorInfo]] = [None] * (len(tables._tb) // TENSOR_ENTRY_BYTES)

    def __len__(self) -> int:
        return len(self._made)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        t = self._made[i]
        if t is None:
            if i < 0:
                i += len(self._made)
            t = self._made[i] = self._t._info(i)
        return t

    def __iter__(self) -> Iterator[TensorInfo]:
        for i in range(len(self._made)):
            yield self[i]


class Tables:
    """Parsed tables: the tensor entries, check entries and offset table,
    with lookups. Made by parse_tables; holds copies of the bytes (the
    tables memfd is unmapped after parsing)."""

    def __init__(self):
        self.allocation_bytes = 0
        self.layers = self.experts = self.halves_per_proj = 0
        self._tb = b""
        self._offs: List[int] = []
        self._order: List[int] = []  # tensor indexes by offset, their starts and ends
        self._starts: List[int] = []
        self._ends: List[int] = []
        self._pos: Optional[dict] = None
        self._names = {}
        self._by_name = {}
        self._signs = {}
        self.offset_table = array.array("Q")  # base-relative offsets, ABSENT where not owned
        self._checks_raw = b""
        self._n_checks = 0
        self._checks: Optional[List[Check]] = None
        self._pending_checks = None  # the parse's context while the check entries wait to be checked
        self.tensors: Sequence[TensorInfo] = ()

    def _info(self, i: int) -> TensorInfo:
        return _make_info(_TENSOR.unpack_from(self._tb, i * TENSOR_ENTRY_BYTES), i, self._names.get(i))

    def offset_index(self, layer: int, expert: Union[int, str], proj: Union[int, str], half: int) -> Optional[int]:
        """Index into offset_table of (layer, expert | "shared" | -1, proj, half); None outside the dimensions."""
        if isinstance(proj, str):
            if proj not in PROJ_NAMES:
                return None
            proj = PROJ_NAMES.index(proj)
        if expert == "shared" or expert == -1:
            e = self.experts
        elif isinstance(expert, int) and 0 <= expert < self.experts:
            e = expert
        else:
            return None
        if not (isinstance(layer, int) and 0 <= layer < self.layers and isinstance(half, int)
                and 0 <= half < self.halves_per_proj and 0 <= proj < 3):
            return None
        return ((layer * (self.experts + 1) + e) * 3 + proj) * self.halves_per_proj + half

    def half(self, layer: int, expert: Union[int, str], proj: Union[int, str], half: int) -> Optional[TensorInfo]:
        """The half record's entry, or None where the rank does not own it (or outside the dimensions)."""
        j = self.offset_index(layer, expert, proj, half)
        if j is None or self.offset_table[j] == ABSENT:
            return None
        if self._pos is None:
            self._pos = dict(zip(self._offs, range(len(self._offs))))
        return self.tensors[self._pos[self.offset_table[j]]]

    def signs(self, layer: int, out: bool) -> Optional[TensorInfo]:
        """A layer's signs.in (out False) or signs.out entry, or None."""
        i = self._signs.get((layer, bool(out)))
        return None if i is None else self.tensors[i]

    def tensor(self, name: str) -> Optional[TensorInfo]:
        """The dense or plain tensor of that name, or None."""
        i = self._by_name.get(name)
        return None if i is None else self.tensors[i]

    def names(self) -> List[str]:
        """The named tensors' names, in table order."""
        return [self._names[i] for i in sorted(self._names)]

    @property
    def checks(self) -> List[Check]:
        """The check entries, checked (unless parse_tables did) and decoded
        on first access; TablesError for a bad one."""
        if self._pending_checks is not None:
            _verify_checks(self._pending_checks)
            self._pending_checks = None
        if self._checks is None:
            out = []
            for (digest, count, _r, *segs) in _CHECK.iter_unpack(self._checks_raw):
                out.append(Check(digest, tuple((segs[2 * s], segs[2 * s + 1]) for s in range(count))))
            self._checks = out
            self._checks_raw = None
        return self._checks


def _terr(i: int, field: str, at: int, what: str) -> TablesError:
    return TablesError(f"image tables: tensors[{i}] '{field}' at byte {at}: {what}", "tensors", i, field, at)


def _head(field: str, at: int, what: str) -> TablesError:
    return TablesError(f"image tables: header '{field}' at byte {at}: {what}", "image tables header", None,
                       field, at)


def _check_entry(i: int, e: tuple, b: int, t: Tables, alloc: int, pool: bytes, pool_next: int) -> int:
    """Checks one tensor entry field by field (the slow path: names the
    first rule broken). Returns the pool offset after its name."""
    (off, length, _xx, layer, expert, proj, half, kind, fmt, dtype, rank, k, b35,
     s0, s1, s2, s3, name_at, out, inp) = e
    shape = (s0, s1, s2, s3)
    if off % ALIGNMENT:
        raise _terr(i, "offset", b, f"{off} is not a multiple of 256")
    if off < IMAGE_HEADER_BYTES:
        raise _terr(i, "offset", b, f"{off} lies inside the image header (the first 4096 bytes)")
    if length == 0:
        raise _terr(i, "length", b + 8, "empty region")
    if off + length > alloc:
        raise _terr(i, "length", b + 8, f"{off} + {length} lies past the allocation of {alloc} bytes")
    if not 1 <= kind <= 5:
        raise _terr(i, "kind", b + 30, f"unknown kind {kind}")
    if kind == 1 and b35 >= len(DTYPES):
        raise _terr(i, "block_dtype", b + 35, f"unknown dtype code {b35}")
    if dtype >= len(DTYPES):
        raise _terr(i, "dtype", b + 32, f"unknown dtype code {dtype}")
    if rank > 4:
        raise _terr(i, "rank", b + 33, f"{rank} > 4")
    for d in range(rank, 4):
        if shape[d]:
            raise _terr(i, "shape", b + 36 + 4 * d, f"dimension {d} is {shape[d]} beyond rank {rank}")
    is_half, signs, dense = kind == 1, kind in (2, 3), kind == 4
    kn = KIND_MESSAGES[kind]
    if (is_half or signs) and layer >= t.layers:
        raise _terr(i, "layer", b + 24, f"{layer} is not below the image's {t.layers} layers")
    if is_half:
        if expert != SHARED_EXPERT and expert >= t.experts:
            raise _terr(i, "expert", b + 26,
                        f"{expert} is neither below the image's {t.experts} experts nor 0xFFFE (shared)")
        if proj >= 3:
            raise _terr(i, "proj", b + 28, f"unknown projection {proj}")
        if half >= t.halves_per_proj:
            raise _terr(i, "half", b + 29, f"{half} is not below the image's {t.halves_per_proj} halves")
    else:
        if expert != NO_EXPERT:
            raise _terr(i, "expert", b + 26, f"{expert} for a {kn}, expected 0xFFFF")
        if proj != NO_PROJ:
            raise _terr(i, "proj", b + 28, f"{proj} for a {kn}, expected 0xFF")
        if half != NO_HALF:
            raise _terr(i, "half", b + 29, f"{half} for a {kn}, expected 0xFF")
    if is_half:
        if not 1 <= k <= 8:
            raise _terr(i, "k", b + 34, f"trellis width {k} is not in 1..8")
        if fmt != k:
            raise _terr(i, "format", b + 31, f"{fmt}, expected the width K {k}")
    elif dense:
        if not 1 <= fmt <= DENSE_FORMATS:
            raise _terr(i, "format", b + 31, f"unknown dense format {fmt}")
        if fmt == TRELLIS and not 1 <= k <= 8:
            raise _terr(i, "k", b + 34, f"trellis width {k} is not in 1..8")
        if fmt != TRELLIS and k != 0:
            raise _terr(i, "k", b + 34, f"{k} for a non-TRELLIS format, expected 0")
        if b35 > 2:
            raise _terr(i, "side", b + 35, f"side {b35} is not 0, 1 or 2")
        if out == 0:
            raise _terr(i, "out", b + 56, "0")
        if inp == 0:
            raise _terr(i, "inp", b + 60, "0")
    elif kind == 5:
        if b35 != 0:
            raise _terr(i, "side", b + 35, f"{b35} for a {kn}, expected 0")
        if fmt not in PLAIN_FORMAT_NAMES:
            raise _terr(i, "format", b + 31, f"unknown plain tensor format {fmt}")
        quant, matrix = fmt == 4, fmt in (1, 2)
        if (k not in (4, 8)) if quant else k != 0:
            raise _terr(i, "k", b + 34, f"{k} for {PLAIN_FORMAT_NAMES[fmt]}, expected "
                        + ("the bits 4 or 8" if quant else "0"))
        name = _plain_format_name(fmt, k, inp)
        if (out == 0) if matrix else (out != 0):
            raise _terr(i, "out", b + 56, f"{out} for {name}, expected "
                        + ("the matrix's d_out" if matrix else "0"))
        if (inp == 0) if (matrix or quant) else (inp != 0):
            raise _terr(i, "inp", b + 60, f"{inp} for {name}, expected "
                        + ("the matrix's d_in" if matrix else "the group size" if quant else "0"))
    else:
        if fmt != 0:
            raise _terr(i, "format", b + 31, f"{fmt} for a {kn}, expected 0")
        if k != 0:
            raise _terr(i, "k", b + 34, f"{k} for a {kn}, expected 0")
    if not dense and kind != 5:
        if not is_half and b35 != 0:
            raise _terr(i, "side", b + 35, f"{b35} for a {kn}, expected 0")
        if out != 0:
            raise _terr(i, "out", b + 56, f"{out} for a {kn}, expected 0")
        if inp != 0:
            raise _terr(i, "inp", b + 60, f"{inp} for a {kn}, expected 0")
    if (is_half or signs) and dtype not in FLOAT_VECTOR:
        raise _terr(i, "dtype", b + 32, f"{DTYPE_NAMES[dtype]} for a {kn}, expected F16, BF16 or F32")
    if is_half and b35 not in FLOAT_VECTOR:
        raise _terr(i, "block_dtype", b + 35,
                    f"{DTYPE_NAMES[b35]} for a half record's block row, expected F16, BF16 or F32")
    if is_half:
        if rank != 3:
            raise _terr(i, "rank", b + 33, f"{rank} for a half record, expected 3")
        if s0 == 0 or s0 % (16 * k):
            raise _terr(i, "shape", b + 36, f"trellis bytes {s0} are not a positive multiple of 16 x K")
        want = s0 + s1 * DTYPE_SIZES[dtype] + s2 * DTYPE_SIZES[b35]
    else:
        if signs and rank != 1:
            raise _terr(i, "rank", b + 33, f"{rank} for a {kn}, expected 1")
        if dense and rank == 0:
            raise _terr(i, "rank", b + 33, "0 for dense data")
        want = DTYPE_SIZES[dtype]
        for d in range(rank):
            want *= shape[d]
    if want != length:
        raise _terr(i, "length", b + 8, f"{length}, but the shape and dtype make {want}")
    if is_half or signs:
        if name_at != NO_NAME:
            raise _terr(i, "name", b + 52, f"{name_at} for a {kn}, expected 0xFFFFFFFF")
        return pool_next
    if name_at == NO_NAME:
        raise _terr(i, "name", b + 52, f"a {kn} without a name")
    if name_at != pool_next:
        raise _terr(i, "name", b + 52,
                    f"pool offset {name_at}, expected {pool_next} (names are packed in tensor order)")
    nul = pool.find(b"\0", name_at)
    if nul < 0:
        raise _terr(i, "name", b + 52, f"the name at pool offset {name_at} has no NUL before the pool's end")
    if nul == name_at:
        raise _terr(i, "name", b + 52, f"empty name at pool offset {name_at}")
    try:
        pool[name_at:nul].decode("utf-8")
    except UnicodeDecodeError:
        raise _terr(i, "name", b + 52, f"the name at pool offset {name_at} is not UTF-8") from None
    return nul + 1


def parse_tables(data, allocation_bytes: int, reference: bool = False, verify_checks: bool = True) -> Tables:
    """Parses a tables file (bytes, or a buffer such as an mmap) for an
    image of ``allocation_bytes`` (``ParseImageTables``). The buffer is
    read during the call only. Raises TablesError. ``verify_checks``
    False: the check entries (80 bytes each; their count and place are
    checked here) are checked entry by entry when Tables.checks is first
    read, which raises the same TablesError then: nothing but a lessee
    that verifies the image reads them, and at GLM-5.3 scale they are
    a third of the parse. ``reference``: check every entry field by
    field (the slow path the fast one falls back to, to name an error),
    for tests."""
    if type(data) is not bytes:
        # A copy: no view of the caller's buffer (an mmap) may outlive this
        # call in a traceback, or the caller could not close it.
        data = bytes(memoryview(data).cast("B"))
    mv = memoryview(data)
    size = len(mv)
    if size < TABLES_HEADER_BYTES:
        raise TablesError(f"image tables: {size} bytes, shorter than the {TABLES_HEADER_BYTES}-byte header",
                          "image tables header", None, "", 0)
    h = bytes(mv[:TABLES_HEADER_BYTES])
    if h[:8] != TABLES_MAGIC:
        raise _head("magic", 0, 'not "EXLR8TBL"')
    (version, hbytes, alloc, layers, experts, halves, _r0, n_tensors, tensors_at, n_checks, checks_at,
     strings_at, strings, offsets_at, offsets_bytes) = struct.unpack_from("<IIQ4I8Q", h, 8)
    if version != TABLES_VERSION:
        raise _head("version", 8, f"version {version} is unknown")
    if hbytes != TABLES_HEADER_BYTES:
        raise _head("header_bytes", 12, f"{hbytes}, expected 128")
    for lo, hi in ((36, 40), (104, 128)):
        nz = _nonzero(h, lo, hi)
        if nz is not None:
            raise _head("reserved", nz, "not zero")
    if alloc < IMAGE_HEADER_BYTES or alloc % ALIGNMENT:
        raise _head("allocation_bytes", 16, f"{alloc} is not a multiple of 256 of at least {IMAGE_HEADER_BYTES}")
    if alloc != allocation_bytes:
        raise _head("allocation_bytes", 16, f"{alloc}, but the image is {allocation_bytes} bytes")
    if layers > MAX_LAYERS:
        raise _head("layers", 24, f"{layers} > {MAX_LAYERS}")
    if experts > MAX_EXPERTS:
        raise _head("experts", 28, f"{experts} > {MAX_EXPERTS}")
    if halves > MAX_HALVES:
        raise _head("halves", 32, f"{halves} > {MAX_HALVES}")
    if n_tensors > MAX_TENSORS:
        raise _head("tensors", 40, f"{n_tensors} entries, more than {MAX_TENSORS}")
    if n_checks > MAX_CHECKS:
        raise _head("checks", 56, f"{n_checks} entries, more than {MAX_CHECKS}")
    if tensors_at != TABLES_HEADER_BYTES:
        raise _head("tensors_offset", 48, f"{tensors_at}, expected {TABLES_HEADER_BYTES}")
    want = tensors_at + n_tensors * TENSOR_ENTRY_BYTES
    if checks_at != want:
        raise _head("checks_offset", 64, f"{checks_at}, expected {want} (after {n_tensors} tensor entries)")
    want = checks_at + n_checks * CHECK_ENTRY_BYTES
    if strings_at != want:
        raise _head("strings_offset", 72, f"{strings_at}, expected {want} (after {n_checks} check entries)")
    if strings > MAX_STRING_BYTES:
        raise _head("strings_bytes", 80, f"{strings}, more than {MAX_STRING_BYTES}")
    want = (strings_at + strings + 7) & ~7
    if offsets_at != want:
        raise _head("offset_table_offset", 88, f"{offsets_at}, expected {want} (the pool's end, aligned to 8)")
    want = layers * (experts + 1) * 3 * halves * 8
    if offsets_bytes != want:
        raise _head("offset_table_bytes", 96,
                    f"{offsets_bytes}, expected layers x (experts + 1) x 3 x halves x 8 = {want}")
    if offsets_at + offsets_bytes != size:
        raise _head("offset_table_bytes", 96,
                    f"the sections end at {offsets_at + offsets_bytes}, but the file has {size} bytes")
    nz = _nonzero(mv, strings_at + strings, offsets_at)
    if nz is not None:
        raise _head("strings_bytes", nz, "padding not zero")

    t = Tables()
    t.allocation_bytes, t.layers, t.experts, t.halves_per_proj = alloc, layers, experts, halves
    pool = bytes(mv[strings_at:strings_at + strings])
    tb = bytes(mv[tensors_at:checks_at])
    table = array.array("Q")
    table.frombytes(mv[offsets_at:offsets_at + offsets_bytes])
    if sys.byteorder != "little":
        table.byteswap()
    cb = bytes(mv[checks_at:strings_at])
    ctx = _Ctx(t, tb, cb, pool, table, tensors_at, checks_at, offsets_at, strings)
    try:
        ok = not reference and _fast_tensors(ctx)
    except TablesError:
        ok = False
    if not ok:
        # The slow path names the first rule broken, in the C++ reader's order.
        _slow_tensors(ctx)
        if not reference:
            raise TablesError("image tables: refused by the fast checks but not by the slow ones (a bug in "
                              "exlr8.tables)", "tensors", None, "", None)
    ctx.reference = reference
    if verify_checks:
        _verify_checks(ctx)
    else:
        t._pending_checks = ctx
    t._tb = tb
    t._names = ctx.names
    t._by_name = ctx.by_name
    t._signs = ctx.signs
    t._offs = ctx.offs
    t._order, t._starts, t._ends = ctx.order, ctx.starts, ctx.ends
    t.offset_table = table
    t._checks_raw = cb
    t._n_checks = n_checks
    t.tensors = _TensorList(t)
    return t


class _Ctx:
    def __init__(self, t, tb, cb, pool, table, tensors_at, checks_at, offsets_at, strings):
        self.t, self.tb, self.cb, self.pool, self.table = t, tb, cb, pool, table
        self.tensors_at, self.checks_at, self.offsets_at, self.strings = tensors_at, checks_at, offsets_at, strings
        self.n = len(tb) // TENSOR_ENTRY_BYTES
        q = memoryview(tb).cast("Q")
        self.offs = q[0::8].tolist()
        self.lens = q[1::8].tolist()
        self.names = {}
        self.by_name = {}
        self.signs = {}
        self.order = None


def _fast_tensors(c: _Ctx) -> bool:
    """Checks every tensor entry and the offset table with C-speed column
    operations; True when all pass (False or a TablesError: the slow path
    then names the first rule broken). Entries other than half records (a
    few thousand) are checked one by one; half records per distinct class
    (the entry with its offset, digest and identity zeroed: what the half
    records of one width share) and their identity fields per column."""
    t, tb, n = c.t, c.tb, c.n
    alloc = t.allocation_bytes
    offs, lens = c.offs, c.lens
    if n and (tb[0::64].count(0) != n or min(lens) < 1):
        return False
    kinds = tb[30::64]
    hidx = list(itertools.compress(range(n), map(operator.eq, kinds, itertools.repeat(1))))
    nh = len(hidx)
    pool_next = 0
    for i in itertools.compress(range(n), map(operator.ne, kinds, itertools.repeat(1))):
        pool_next = _other_entry(c, i, _TENSOR.unpack_from(tb, i * TENSOR_ENTRY_BYTES), pool_next)
    if pool_next != c.strings:
        return False
    if nh:
        get = operator.itemgetter(*hidx) if nh > 1 else (lambda col: (col[hidx[0]],))
        # Bytes 30-63 of each half record: its class. One entry per class is
        # checked whole; the others' lengths must be their class's.
        classes = get(_CLASS_BYTES.findall(tb))
        want = {}
        for cls in set(classes):
            i = hidx[classes.index(cls)]
            e = _TENSOR.unpack_from(tb, i * TENSOR_ENTRY_BYTES)
            _check_entry(i, e, c.tensors_at + i * 64, t, alloc, c.pool, 0)
            want[cls] = e[1]
        hoffs = get(offs)
        if list(map(want.__getitem__, classes)) != list(get(lens)):
            return False
        # Identity: (layer, expert) as one u32 (bytes 24-27), (proj, half) as
        # one u16 (28-29); each distinct value checked once and turned into
        # its share of the offset-table index.
        le_c = get(memoryview(tb).cast("I")[6::16].tolist())
        ph_c = get(memoryview(tb).cast("H")[14::32].tolist())
        E, E1, H = t.experts, t.experts + 1, t.halves_per_proj
        le_base = {}
        for v in set(le_c):
            layer, expert = v & 0xFFFF, v >> 16
            if layer >= t.layers or (expert >= E and expert != SHARED_EXPERT):
                return False
            le_base[v] = (layer * E1 + (E if expert == SHARED_EXPERT else expert)) * 3 * H
        ph_off = {}
        for v in set(ph_c):
            proj, half = v & 0xFF, v >> 8
            if proj >= 3 or half >= H:
                return False
            ph_off[v] = proj * H + half
        js = list(map(operator.add, map(le_base.__getitem__, le_c), map(ph_off.__getitem__, ph_c)))
        if len(set(js)) != nh:
            return False
        expected = array.array("Q", [ABSENT]) * len(c.table)
        for j, o in zip(js, hoffs):
            expected[j] = o
        if expected != c.table:
            return False
    elif c.table.count(ABSENT) != len(c.table):
        return False
    # No overlap: sorted by offset, each region ends before the next starts.
    order = sorted(range(n), key=offs.__getitem__)
    so = list(map(offs.__getitem__, order))
    ends = list(map(operator.add, so, map(lens.__getitem__, order)))
    if n and (so[0] < IMAGE_HEADER_BYTES or ends[-1] > alloc):
        return False
    if n > 1 and not all(map(operator.le, ends[:-1], so[1:])):
        return False
    c.order, c.starts, c.ends = order, so, ends
    return True


def _other_entry(c: _Ctx, i: int, e: tuple, pool_next: int) -> int:
    """A signs, dense or plain entry: checked, and entered in its lookup."""
    b = c.tensors_at + i * TENSOR_ENTRY_BYTES
    start = pool_next
    pool_next = _check_entry(i, e, b, c.t, c.t.allocation_bytes, c.pool, pool_next)
    kind, layer = e[7], e[3]
    if kind in (2, 3):
        key = (layer, kind == 3)
        if key in c.signs:
            raise _terr(i, "layer", b + 24, f"L{layer} {KIND_NAMES[kind]} is also tensors[{c.signs[key]}]")
        c.signs[key] = i
    else:
        name = c.pool[start:pool_next - 1].decode("utf-8")
        if name in c.by_name:
            raise _terr(i, "name", b + 52, f"{name!r} is also tensors[{c.by_name[name]}]'s name")
        c.by_name[name] = i
        c.names[i] = name
    return pool_next


def _verify_checks(c: _Ctx) -> None:
    """Every check entry (the first bad one raises, as the C++ reader's)."""
    if c.reference:
        _slow_checks(c)
    else:
        _fast_checks(c)


def _fast_checks(c: _Ctx) -> bool:
    """Check entries with one segment that is a whole region (half records,
    signs, plain tensors) pass on columns; the others (a dense block's
    pieces) are checked one by one."""
    cb = c.cb
    m = len(cb) // CHECK_ENTRY_BYTES
    if m == 0:
        return True
    # A region as one int, length << 64 | offset; a first segment the same way.
    rep, shl, or_ = itertools.repeat, operator.lshift, operator.or_
    regions = set(map(or_, map(shl, c.lens, rep(64)), c.offs))
    u = memoryview(cb).cast("I")
    q = memoryview(cb).cast("Q")
    whole = map(regions.__contains__, map(or_, map(shl, q[3::10].tolist(), rep(64)), q[2::10].tolist()))
    counts = u[2::20].tolist()
    tails = [counts, u[3::20].tolist()] + [q[w::10].tolist() for w in range(4, 10)]
    if counts.count(1) == m and not any(map(any, tails[1:])):
        good = whole
    else:  # 0 or several segments, or a reserved or unused field not zero
        good = map(operator.and_, whole, map(operator.eq, counts, itertools.repeat(1)))
        for col in tails[1:]:
            good = map(operator.and_, good, map(operator.not_, col))
    for i in itertools.compress(range(m), map(operator.not_, good)):
        _check_check(i, _CHECK.unpack_from(cb, i * CHECK_ENTRY_BYTES), c.checks_at + i * CHECK_ENTRY_BYTES,
                     c.t.allocation_bytes, c.starts, c.ends)
    return True


def _slow_tensors(c: _Ctx) -> None:
    """The reference: every tensor entry field by field, in order, then the
    cross-entry rules. Raises the first TablesError."""
    t, tb, n = c.t, c.tb, c.n
    E, E1, H = t.experts, t.experts + 1, t.halves_per_proj
    half_index = array.array("l", [-1]) * len(c.table)
    expected = array.array("Q", [ABSENT]) * len(c.table)
    c.names, c.by_name, c.signs = {}, {}, {}
    pool_next = 0
    for i in range(n):
        e = _TENSOR.unpack_from(tb, i * TENSOR_ENTRY_BYTES)
        if e[7] != 1:
            pool_next = _other_entry(c, i, e, pool_next)
            continue
        _check_entry(i, e, c.tensors_at + i * TENSOR_ENTRY_BYTES, t, t.allocation_bytes, c.pool, pool_next)
        layer, expert, proj, half = e[3], e[4], e[5], e[6]
        j = ((layer * E1 + (E if expert == SHARED_EXPERT else expert)) * 3 + proj) * H + half
        if half_index[j] >= 0:
            raise _terr(i, "layer", c.tensors_at + i * TENSOR_ENTRY_BYTES + 24,
                        f"{_make_info(e, i, None).what()} is also tensors[{half_index[j]}]")
        half_index[j] = i
        expected[j] = e[0]
    if pool_next != c.strings:
        raise _head("strings_bytes", 80, f"{c.strings}, but the names take {pool_next} (no unused pool bytes)")
    offs, lens = c.offs, c.lens
    order = sorted(range(n), key=offs.__getitem__)
    prev_end, prev = 0, -1
    for i in order:
        if offs[i] < prev_end:
            raise _terr(i, "offset", c.tensors_at + i * TENSOR_ENTRY_BYTES,
                        f"region {offs[i]} overlaps tensors[{prev}] ({offs[prev]} + {lens[prev]})")
        prev_end, prev = offs[i] + lens[i], i
    table = c.table
    for j in range(len(table)):
        if table[j] != expected[j]:
            i = half_index[j]
            got = "absent" if table[j] == ABSENT else str(table[j])
            want_s = ("absent (no half record)" if i < 0 else
                      f"{expected[j]} (tensors[{i}], "
                      f"{_make_info(_TENSOR.unpack_from(tb, i * TENSOR_ENTRY_BYTES), i, None).what()})")
            raise TablesError(f"image tables: offset_table[{j}] at byte {c.offsets_at + 8 * j}: {got}, "
                              f"expected {want_s}", "offset_table", j, "offset", c.offsets_at + 8 * j)
    c.order = order
    c.starts = [offs[i] for i in order]
    c.ends = [offs[i] + lens[i] for i in order]


def _slow_checks(c: _Ctx) -> None:
    for i in range(len(c.cb) // CHECK_ENTRY_BYTES):
        _check_check(i, _CHECK.unpack_from(c.cb, i * CHECK_ENTRY_BYTES), c.checks_at + i * CHECK_ENTRY_BYTES,
                     c.t.allocation_bytes, c.starts, c.ends)


def _check_check(i: int, c: tuple, b: int, alloc: int, starts: List[int], ends: List[int]) -> None:
    def err(field: str, at: int, what: str) -> TablesError:
        return TablesError(f"image tables: checks[{i}] '{field}' at byte {at}: {what}", "checks", i, field, at)
    count, reserved, segs = c[1], c[2], c[3:]
    if not 1 <= count <= MAX_SEGMENTS:
        raise err("segments", b + 8, f"{count} segments, expected 1 to 4")
    if reserved:
        raise err("reserved", b + 12, "not zero")
    for s in range(count, MAX_SEGMENTS):
        for w in range(2):
            if segs[2 * s + w]:
                raise err("segments", b + 16 + 16 * s + 8 * w, "an unused segment is not zero")
    for s in range(count):
        at = b + 16 + 16 * s
        so, sl = segs[2 * s], segs[2 * s + 1]
        field = f"segment {s}"
        if sl == 0:
            raise err(field, at + 8, "empty segment")
        if so + sl > alloc:
            raise err(field, at, f"{so} + {sl} lies past the allocation of {alloc} bytes")
        k = bisect.bisect_right(starts, so)
        if k == 0 or so + sl > ends[k - 1]:
            raise err(field, at, f"[{so}, {so + sl}) is not inside one region of the tensor table")


def check_agreement(h: ImageHeader, t: Tables) -> None:
    """Whether a parsed header and parsed tables describe one image (``CheckImageAgreement``)."""
    def err(what: str) -> TablesError:
        return TablesError(f"image header and tables disagree: {what}", "image header", None, "", None)
    if h.allocation_bytes != t.allocation_bytes:
        raise err(f"allocation {h.allocation_bytes} vs {t.allocation_bytes} bytes")
    if (h.layers, h.experts, h.halves_per_proj) != (t.layers, t.experts, t.halves_per_proj):
        raise err(f"dimensions {h.layers}x{h.experts}x{h.halves_per_proj} vs "
                  f"{t.layers}x{t.experts}x{t.halves_per_proj}")
    if h.offset_table[1] != len(t.offset_table) * 8:
        raise err(f"offset table {h.offset_table[1]} vs {len(t.offset_table) * 8} bytes")
    # Fast: regions sorted by offset; those starting in each section are
    # of its kinds and end inside it, and every region is in one.
    starts, ends, order, kinds = t._starts, t._ends, t._order, t._tb[30::64]
    placed = 0
    ok = True
    for (so, sb), allowed in ((h.halves, b"\x01"), (h.vectors, b"\x02\x03"), (h.dense, b"\x04\x05")):
        lo, hi = bisect.bisect_left(starts, so), bisect.bisect_left(starts, so + sb)
        if hi > lo:
            ks = bytes(map(kinds.__getitem__, order[lo:hi]))
            if ends[hi - 1] > so + sb or sum(map(ks.count, allowed)) != hi - lo:
                ok = False
        placed += hi - lo
    if ok and placed == len(starts):
        return
    sections = {1: h.halves, 2: h.vectors, 3: h.vectors, 4: h.dense, 5: h.dense}
    for i, t_i in enumerate(t.tensors):
        so, sb = sections[{"half": 1, "signs.in": 2, "signs.out": 3, "dense": 4, "plain": 5}[t_i.kind]]
        if t_i.offset < so or t_i.offset + t_i.length > so + sb:
            raise err(f"tensors[{i}] ({t_i.what()}, {t_i.offset} + {t_i.length}) lies outside its section "
                      f"[{so}, {so + sb})")
    raise err("a region lies outside its section")  # unreachable: the loop names it
