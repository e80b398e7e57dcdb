#!/usr/bin/env python3
"""Writes a release again through Hugging Face's own safetensors library.

exlr8's reader and exlr8's synthesizer were written by the same hands, so the
releases the tests pull share the writer's choices: tensor order, where
`__metadata__` sits, padding between halves. A release written by other tools
makes other choices. This script takes a release and writes every safetensors
file of it again with the real library (`safetensors.serialize_file`, from
PyPI), which
  - puts `__metadata__` first and sorts tensors by dtype alignment, then name
    (so the halves of a width file land in lexical order: e0.down.h0,
    e0.down.h1, e0.down.h10, ...);
  - lays the data out back to back, with no `__pad.` tensors and no alignment
    (the spec requires neither, U-1 and U-2);
  - pads the header with spaces to a multiple of 8.
Since halves move, every `k{K}.index` / `shared.k{K}.index` offset is mapped
to where the library put its bytes; the bytes themselves, and so every
checksum in the format, are unchanged. Where the spec leaves a spelling open
it picks another one, too: the index metadata `widths` and `shared_widths`
become "4, 3, 2" for "2,3,4" (U-13), and the JSON files (manifests, config)
are written again by Python's json module, indented, keys sorted. Other
files are copied as they are.

It also reads every input file with the library (`safetensors.deserialize`),
so a file the real library refuses fails here.

  safetensors_rewrite.py IN_RELEASE OUT_RELEASE
Prints one line per rewritten file (old and new data start, halves moved).
"""
import ctypes
import glob
import json
import os
import re
import shutil
import struct
import sys

import safetensors

# safetensors header dtype -> the library's TensorSpec dtype name.
SPEC_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "U16": "uint16", "I16": "int16", "U32": "uint32",
    "I32": "int32", "U64": "uint64", "I64": "int64", "F16": "float16", "BF16": "bfloat16", "F32": "float32",
    "F64": "float64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}
INDEX_NAME = re.compile(r"^(shared\.)?k(\d+)\.index$")


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return 8 + n, header


def load(path):
    """(metadata, {name: (dtype, shape, bytes)}, {name: absolute start}) as the library reads it."""
    data_start, header = read_header(path)
    with open(path, "rb") as f:
        tensors = {name: (t["dtype"], list(t["shape"]), bytes(t["data"]))
                   for name, t in safetensors.deserialize(f.read())}
    starts = {name: data_start + t["data_offsets"][0] for name, t in header.items() if name != "__metadata__"}
    return header.get("__metadata__"), tensors, starts


def write(path, metadata, tensors):
    """serialize_file with the library; returns {name: absolute start} as written."""
    keep = []  # the buffers must outlive the call
    specs = {}
    for name, (dtype, shape, data) in tensors.items():
        buf = ctypes.create_string_buffer(data, len(data)) if data else ctypes.create_string_buffer(1)
        keep.append(buf)
        if hasattr(safetensors, "TensorSpec"):  # 0.7 and later
            specs[name] = safetensors.TensorSpec(dtype=SPEC_DTYPES[dtype], shape=shape,
                                                 data_ptr=ctypes.addressof(buf), data_len=len(data))
        else:
            specs[name] = {"dtype": SPEC_DTYPES[dtype], "shape": shape, "data": data}
    safetensors.serialize_file(specs, path, metadata=metadata)
    data_start, header = read_header(path)
    return {name: data_start + t["data_offsets"][0] for name, t in header.items() if name != "__metadata__"}


def remap(offset, length, old_starts, sizes, new_starts, where):
    """Where the `length` bytes at old absolute `offset` of a width file are after the rewrite."""
    for name, start in old_starts.items():
        if start <= offset and offset + length <= start + sizes[name]:
            return new_starts[name] + (offset - start)
    sys.exit(f"safetensors_rewrite: {where}: bytes [{offset}, {offset + length}) are not inside one tensor")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    if os.path.exists(dst):
        sys.exit(f"safetensors_rewrite: {dst} exists")
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors"))
    for path in sorted(glob.glob(os.path.join(dst, "**", "*.json"), recursive=True)):
        with open(path) as f:
            value = json.load(f)
        with open(path, "w") as f:
            json.dump(value, f, indent=2, sort_keys=True)
            f.write("\n")
    print(f"safetensors_rewrite: safetensors {safetensors.__version__}")

    # Width files first: where each tensor was, and where it is now.
    moved = {}  # (layer file stem, K) -> (old starts, sizes, new starts)
    for path in sorted(glob.glob(os.path.join(src, "**", "*.safetensors"), recursive=True)):
        rel = os.path.relpath(path, src)
        m = re.search(r"^(.*)\.k(\d+)\.safetensors$", rel)
        if not m:
            continue
        metadata, tensors, old_starts = load(path)
        kept = {n: t for n, t in tensors.items() if not n.startswith("__pad.")}
        new_starts = write(os.path.join(dst, rel), metadata, kept)
        sizes = {n: len(t[2]) for n, t in tensors.items()}
        moved[(m.group(1), int(m.group(2)))] = (old_starts, sizes, new_starts)
        shifted = sum(1 for n in kept if new_starts[n] != old_starts[n])
        print(f"  {rel}: {len(kept)} tensors ({len(tensors) - len(kept)} pads dropped), {shifted} moved")

    # Then the index files (their offsets follow the halves) and every other file.
    for path in sorted(glob.glob(os.path.join(src, "**", "*.safetensors"), recursive=True)):
        rel = os.path.relpath(path, src)
        if re.search(r"\.k\d+\.safetensors$", rel):
            continue
        metadata, tensors, _ = load(path)
        remapped = 0
        if rel.endswith(".index.safetensors"):
            stem = rel[: -len(".index.safetensors")]
            for key in ("widths", "shared_widths"):
                if metadata and key in metadata:
                    metadata[key] = ", ".join(reversed(metadata[key].split(",")))
            for name, (dtype, shape, data) in list(tensors.items()):
                m = INDEX_NAME.match(name)
                if not m:
                    continue
                old_starts, sizes, new_starts = moved[(stem, int(m.group(2)))]
                fmt = {"I64": "q", "U64": "Q", "I32": "i", "U32": "I"}[dtype]
                values = list(struct.unpack(f"<{len(data) // struct.calcsize(fmt)}{fmt}", data))
                for i in range(0, len(values), 2):  # (offset, length) pairs
                    where = f"{rel}: {name} entry {i // 2}"
                    values[i] = remap(values[i], values[i + 1], old_starts, sizes, new_starts, where)
                    remapped += 1
                tensors[name] = (dtype, shape, struct.pack(f"<{len(values)}{fmt}", *values))
        write(os.path.join(dst, rel), metadata, tensors)
        print(f"  {rel}: {len(tensors)} tensors" + (f", {remapped} half offsets mapped" if remapped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
