"""The lease v2 description (schema/lease/description-v2.schema.json),
parsed strictly: every field of the schema with its type and range, no
unknown or duplicate member, and the cross-field rules the C++ parser
(client/lease/description_v2.cpp, ParseLeaseDescriptionV2) enforces. Each
refusal is a DescriptionError naming the field's path and its value.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from .errors import DescriptionError

MAX_DESCRIPTION_BYTES = 65536
MAX_ALLOCATIONS = 8
MAX_ALLOCATION_BYTES = 1 << 62
MAX_RELEASE_DEADLINE_S = 3600
MAX_TEXT = 4096
INT_MAX = 2**31 - 1
U64_MAX = 2**64 - 1
# IMAGE.md's caps (client/lease/image_layout.h).
MAX_LAYERS = 0xFFFE
MAX_EXPERTS = 0xFFFD
MAX_HALVES = 0xFE
MAX_TENSORS = 1 << 24
MAX_CHECKS = 1 << 25
MAX_STRING_BYTES = 1 << 28
IMAGE_HEADER_BYTES = 4096
TABLES_HEADER_BYTES = 128
TENSOR_ENTRY_BYTES = 64
CHECK_ENTRY_BYTES = 80
ALIGNMENT = 256

_UUID = re.compile(r"(GPU|MIG)-[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
_PCI = re.compile(r"([0-9A-Fa-f]{4}|[0-9A-Fa-f]{8}):[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
_IPC = re.compile(r"ipc:[0-9A-Fa-f]{128}")


@dataclass(frozen=True)
class GpuRef:
    """memory.device: the holder's GPU. Find it by ``uuid``; the ordinal is
    the holder's, for logs only."""
    uuid: str
    pci_bus_id: str
    ordinal_in_holder: int


@dataclass(frozen=True)
class Allocation:
    """One of memory.allocations: its size and how it travels ("fd", or
    "ipc:" and 128 hex digits, a legacy CUDA IPC handle)."""
    bytes: int
    handle: str

    @property
    def is_fd(self) -> bool:
        return self.handle == "fd"


@dataclass(frozen=True)
class ImageRef:
    allocation: int
    header_offset: int
    bytes: int
    offset_table: int
    offset_table_bytes: int
    layers: int
    experts: int
    halves: int


@dataclass(frozen=True)
class TablesRef:
    bytes: int
    tensors: int
    checks: int
    strings: int


@dataclass(frozen=True)
class Description:
    """The parsed description line. ``proof`` is the proof of contents as
    the holder sent it (a dict, validated); ``raw`` the whole object."""
    repo: str
    commit: str
    manifest: str
    tp: int
    rank: int
    memory_kind: str  # "host" or "device"
    device: Optional[GpuRef]
    allocations: List[Allocation]
    image: ImageRef
    tables: TablesRef
    proof: Dict[str, Any]
    release_deadline_s: int
    raw: Dict[str, Any]

    @property
    def fd_count(self) -> int:
        """Descriptors that come with the line: one per "fd" allocation, then the tables'."""
        return sum(1 for a in self.allocations if a.is_fd) + 1


def _describe(v: Any) -> str:
    if isinstance(v, str):
        s = v if len(v) <= 40 else v[:40] + "..."
        return json.dumps(s)
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return json.dumps(v)


def _fail(field: str, value: Any, what: str) -> DescriptionError:
    return DescriptionError(f"lease description: '{field}': {what}", field, value)


class _Obj:
    """One object of the description at ``path``; members are looked up in
    it and errors name them by their full path."""

    def __init__(self, v: Dict[str, Any], path: str):
        self.v = v
        self.path = path

    def p(self, field: str) -> str:
        return f"{self.path}.{field}" if self.path else field

    def get(self, field: str) -> Any:
        if field not in self.v:
            where = f"'{self.path}'" if self.path else "the description"
            raise DescriptionError(f"lease description: {where}: no '{field}'", self.p(field), None)
        return self.v[field]

    def only(self, known) -> None:
        for k in self.v:
            if k not in known:
                raise _fail(self.p(k), self.v[k], "unknown field")

    def int(self, field: str, lo: int, hi: int) -> int:
        f = self.get(field)
        if type(f) is not int or f < lo or f > hi:
            raise _fail(self.p(field), f, f"{_describe(f)} is not an integer in [{lo}, {hi}]")
        return f

    def seconds(self, field: str) -> float:
        f = self.get(field)
        if type(f) not in (int, float) or not math.isfinite(f) or f < 0:
            raise _fail(self.p(field), f, f"{_describe(f)} is not a finite number >= 0")
        return float(f)

    def bool(self, field: str) -> bool:
        f = self.get(field)
        if type(f) is not bool:
            raise _fail(self.p(field), f, f"{_describe(f)} is not true or false")
        return f

    def text(self, field: str) -> str:
        f = self.get(field)
        if type(f) is not str or not f or len(f.encode("utf-8", "surrogatepass")) > MAX_TEXT:
            raise _fail(self.p(field), f, f"{_describe(f)} is not a string of 1 to {MAX_TEXT} bytes")
        return f

    def child(self, field: str) -> "_Obj":
        f = self.get(field)
        if type(f) is not dict:
            raise _fail(self.p(field), f, f"{_describe(f)}, not an object")
        return _Obj(f, self.p(field))


def _pairs(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise DescriptionError(f"lease description: member '{k}' appears twice", k, v)
        d[k] = v
    return d


def _constant(name):
    raise DescriptionError(f"lease description: {name} is not JSON", "", name)


def offset_table_bytes(layers: int, experts: int, halves: int) -> int:
    return layers * (experts + 1) * 3 * halves * 8


def tables_file_bytes(tensors: int, checks: int, strings: int, table_bytes: int) -> int:
    head = TABLES_HEADER_BYTES + tensors * TENSOR_ENTRY_BYTES + checks * CHECK_ENTRY_BYTES + strings
    return ((head + 7) & ~7) + table_bytes


def parse_description(text: bytes) -> Description:
    """Parses one description line (without its newline). Raises
    DescriptionError naming the field and value of the first rule broken."""
    if len(text) > MAX_DESCRIPTION_BYTES:
        raise DescriptionError(f"lease description: larger than {MAX_DESCRIPTION_BYTES} bytes", "", None)
    try:
        s = text.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DescriptionError(f"lease description: not UTF-8 at byte {e.start}", "", None) from None
    try:
        v = json.loads(s, object_pairs_hook=_pairs, parse_constant=_constant)
    except json.JSONDecodeError as e:
        raise DescriptionError(f"lease description: not JSON: {e.msg} at character {e.pos}", "", None) from None
    except RecursionError:
        raise DescriptionError("lease description: nested too deeply", "", None) from None
    if type(v) is not dict:
        raise DescriptionError(f"lease description: {_describe(v)}, not an object", "", v)
    top = _Obj(v, "")
    version = top.get("version")
    if type(version) is not int or version != 2:
        raise _fail("version", version, f"version {_describe(version)} is not 2")
    top.only(("version", "repo", "commit", "manifest", "tp", "rank", "memory", "image", "tables",
              "proof", "release_deadline_s"))
    repo, commit, manifest = top.text("repo"), top.text("commit"), top.text("manifest")
    tp = top.int("tp", 1, INT_MAX)
    rank = top.int("rank", 0, tp - 1)

    memory = top.child("memory")
    memory.only(("kind", "device", "allocations"))
    kind = memory.get("kind")
    if kind not in ("device", "host") or type(kind) is not str:
        raise _fail("memory.kind", kind, f"unknown memory kind {_describe(kind)} (device or host)")
    device = None
    if "device" in memory.v or kind == "device":
        dev = memory.child("device")
        dev.only(("uuid", "pci_bus_id", "ordinal_in_holder"))
        uuid = dev.text("uuid")
        if not _UUID.fullmatch(uuid):
            raise _fail("memory.device.uuid", uuid,
                        f"{_describe(uuid)} is not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)")
        pci = dev.text("pci_bus_id")
        if not _PCI.fullmatch(pci):
            raise _fail("memory.device.pci_bus_id", pci, f"{_describe(pci)} is not a PCI bus id (0000:4E:00.0)")
        device = GpuRef(uuid, pci, dev.int("ordinal_in_holder", 0, INT_MAX))
    allocs = memory.get("allocations")
    if type(allocs) is not list or not 1 <= len(allocs) <= MAX_ALLOCATIONS:
        raise _fail("memory.allocations", allocs,
                    f"{_describe(allocs)} is not an array of 1 to {MAX_ALLOCATIONS} allocations")
    allocations = []
    for i, item in enumerate(allocs):
        where = f"memory.allocations[{i}]"
        if type(item) is not dict:
            raise _fail(where, item, f"{_describe(item)}, not an object")
        a = _Obj(item, where)
        a.only(("bytes", "handle"))
        nbytes = a.int("bytes", 1, MAX_ALLOCATION_BYTES)
        handle = a.get("handle")
        ok = type(handle) is str and (handle == "fd" or (kind == "device" and _IPC.fullmatch(handle)))
        if not ok:
            raise _fail(where + ".handle", handle, _describe(handle) + (
                " is not \"fd\" (host memory travels as a descriptor)" if kind == "host"
                else " is neither \"fd\" nor \"ipc:\" and 128 hex digits"))
        allocations.append(Allocation(nbytes, handle))

    image = top.child("image")
    image.only(("allocation", "header_offset", "bytes", "offset_table", "offset_table_bytes", "layers",
                "experts", "halves"))
    allocation = image.int("allocation", 0, len(allocations) - 1)
    alloc_bytes = allocations[allocation].bytes
    header_offset = image.int("header_offset", 0, U64_MAX)
    if header_offset % ALIGNMENT:
        raise _fail("image.header_offset", header_offset, f"{header_offset} is not a multiple of 256")
    ibytes = image.int("bytes", IMAGE_HEADER_BYTES, U64_MAX)
    if ibytes % ALIGNMENT:
        raise _fail("image.bytes", ibytes, f"{ibytes} is not a multiple of 256")
    if header_offset + ibytes > alloc_bytes:
        raise _fail("image.bytes", ibytes, f"the image [{header_offset}, +{ibytes}) lies outside allocation "
                    f"{allocation} of {alloc_bytes} bytes")
    layers = image.int("layers", 0, MAX_LAYERS)
    experts = image.int("experts", 0, MAX_EXPERTS)
    halves = image.int("halves", 0, MAX_HALVES)
    otable = image.int("offset_table", IMAGE_HEADER_BYTES, U64_MAX)
    if otable % ALIGNMENT:
        raise _fail("image.offset_table", otable, f"{otable} is not a multiple of 256")
    otable_bytes = image.int("offset_table_bytes", 0, U64_MAX)
    want = offset_table_bytes(layers, experts, halves)
    if otable_bytes != want:
        raise _fail("image.offset_table_bytes", otable_bytes,
                    f"{otable_bytes}, expected layers x (experts + 1) x 3 x halves x 8 = {want}")
    if otable + otable_bytes > ibytes:
        raise _fail("image.offset_table", otable, f"the offset table [{otable}, +{otable_bytes}) lies outside "
                    f"the image of {ibytes} bytes")

    tables = top.child("tables")
    tables.only(("bytes", "tensors", "checks", "strings"))
    tbytes = tables.int("bytes", 0, U64_MAX)
    ntensors = tables.int("tensors", 0, MAX_TENSORS)
    nchecks = tables.int("checks", 0, MAX_CHECKS)
    nstrings = tables.int("strings", 0, MAX_STRING_BYTES)
    file_bytes = tables_file_bytes(ntensors, nchecks, nstrings, otable_bytes)
    if file_bytes != tbytes:
        raise _fail("tables.bytes", tbytes, f"{tbytes}, but the counts and the offset table make {file_bytes}")

    proof = top.child("proof")
    proof.only(("commit", "hashed", "decoded", "dense_decoded", "seconds", "mismatch"))
    pcommit = proof.text("commit")
    if pcommit != commit:
        raise _fail("proof.commit", pcommit, f"{_describe(pcommit)} is not the description's commit")
    hashed = proof.child("hashed")
    hashed.only(("regions", "bytes", "mismatches"))
    regions = hashed.int("regions", 0, U64_MAX)
    hashed.int("bytes", 0, U64_MAX)
    hashed_mismatches = hashed.int("mismatches", 0, regions)
    decoded = proof.child("decoded")
    decoded.only(("halves", "of", "seed", "every_layer_width_projection", "tiles_bit_exact", "max_block_error"))
    of = decoded.int("of", 0, U64_MAX)
    decoded.int("halves", 0, of)
    decoded.int("seed", 0, U64_MAX)
    decoded.bool("every_layer_width_projection")
    tiles_bit_exact = decoded.bool("tiles_bit_exact")
    decoded.seconds("max_block_error")
    dense = proof.child("dense_decoded")
    dense.only(("tensors", "mismatches"))
    dtensors = dense.int("tensors", 0, U64_MAX)
    dense_mismatches = dense.int("mismatches", 0, dtensors)
    seconds = proof.child("seconds")
    seconds.only(("read", "upload", "hash", "decode"))
    for f in ("read", "upload", "hash", "decode"):
        seconds.seconds(f)
    mismatch = proof.get("mismatch")
    clean = hashed_mismatches == 0 and dense_mismatches == 0 and tiles_bit_exact
    if mismatch is None:
        if not clean:
            raise _fail("proof.mismatch", None, "null, but the proof reports a mismatch (name where it is)")
    else:
        if type(mismatch) is not dict:
            raise _fail("proof.mismatch", mismatch, f"{_describe(mismatch)}, not an object or null")
        if clean:
            raise _fail("proof.mismatch", mismatch, "names a mismatch, but the proof reports none")
        m = _Obj(mismatch, "proof.mismatch")
        m.only(("tensor", "offset", "layer", "expert", "proj", "half", "name"))
        if ntensors == 0:
            raise _fail("proof.mismatch.tensor", mismatch.get("tensor"), "names a tensor, but the tables hold none")
        m.int("tensor", 0, ntensors - 1)
        m.int("offset", 0, ibytes - 1)
        if m.get("layer") is not None:
            m.int("layer", 0, MAX_LAYERS)
        if m.get("expert") is not None:
            m.int("expert", -1, MAX_EXPERTS)
        proj = m.get("proj")
        if proj is not None and proj not in ("gate", "up", "down"):
            raise _fail("proof.mismatch.proj", proj, f"unknown projection {_describe(proj)} (gate, up, down or null)")
        if m.get("half") is not None:
            m.int("half", 0, MAX_HALVES)
        if m.get("name") is not None:
            m.text("name")
    deadline = top.int("release_deadline_s", 1, MAX_RELEASE_DEADLINE_S)

    return Description(
        repo=repo, commit=commit, manifest=manifest, tp=tp, rank=rank, memory_kind=kind, device=device,
        allocations=allocations,
        image=ImageRef(allocation, header_offset, ibytes, otable, otable_bytes, layers, experts, halves),
        tables=TablesRef(tbytes, ntensors, nchecks, nstrings), proof=v["proof"],
        release_deadline_s=deadline, raw=v)
