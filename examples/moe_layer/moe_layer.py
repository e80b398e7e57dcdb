#!/usr/bin/env python3
"""moe_layer.py: one MoE layer's expert outputs from leases only, in Python
(the exlr8 package; the same computation and output file as moe_layer.cpp).

  moe_layer.py --layer L (--input FILE | --seed S) --out FILE SOCK...

SOCK...: the lease sockets of ALL TP ranks of one staged fileset, any order.
For every routed expert e and the shared expert:
  y_e = sum over halves h of (silu(x . W_gate_h) * (x . W_up_h)) . W_down_h
with W from Lease.half_weights (libexlr8client's exlr8_lease_half_weights
through ctypes: set EXLR8CLIENT_LIBRARY to the library's path unless the
linker finds it), (input, output) orientation (spec 8.4): gate/up
(hidden, 128), down (128, hidden). Half h of expert e is on rank
(16e + h + L) mod N (spec 13); the shared expert is on every rank (spec
U-11), taken from rank h mod N.

Host leases: numpy, float64 accumulation. Device leases: torch on the
lease's GPU (float64 matvecs), weights written there by the library.
The output file is [experts + 1][hidden] little-endian float32, the shared
expert last (zeros without one). Exit status 0, or 1 with the error.
"""

import argparse
import math
import sys

import exlr8

HALF_WIDTH = 128


def seeded_input(seed, hidden):
    """splitmix64; x[i] = (next >> 40) / 2^23 - 1 (as moe_layer.cpp)."""
    mask = (1 << 64) - 1
    state = seed & mask
    x = []
    for _ in range(hidden):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        x.append((z >> 40) / 8388608.0 - 1.0)
    return x


def open_all(sockets):
    leases = [exlr8.Lease(s) for s in sockets]
    first = leases[0].description
    if first.tp != len(sockets):
        raise SystemExit(f"moe_layer.py: {sockets[0]} holds a rank of TP {first.tp}, {len(sockets)} sockets "
                         "given: give every rank's")
    by_rank = [None] * first.tp
    for s, lease in zip(sockets, leases):
        d = lease.description
        if (d.repo, d.commit, d.manifest, d.tp) != (first.repo, first.commit, first.manifest, first.tp):
            raise SystemExit(f"moe_layer.py: {s} holds another fileset than {sockets[0]}")
        if not 0 <= d.rank < first.tp or by_rank[d.rank] is not None:
            raise SystemExit(f"moe_layer.py: {s}: rank {d.rank} twice or out of range")
        by_rank[d.rank] = lease
    return by_rank


def owner(by_rank, layer, expert, proj, h):
    n = len(by_rank)
    rank = h % n if expert == "shared" else (16 * expert + h + layer) % n
    t = by_rank[rank].half(layer, expert, proj, h)
    if t is None:
        raise SystemExit(f"moe_layer.py: rank {rank} ({by_rank[rank].path}) does not hold layer {layer} "
                         f"expert {expert} {proj} half {h}")
    return by_rank[rank], t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layer", type=int, required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--input")
    src.add_argument("--seed", type=lambda v: int(v, 0))
    ap.add_argument("--out", required=True)
    ap.add_argument("sockets", nargs="+")
    a = ap.parse_args()

    by_rank = open_all(a.sockets)
    d = by_rank[0].description
    device = d.memory_kind != "host"
    experts, halves = d.image.experts, d.image.halves
    _, t0 = owner(by_rank, a.layer, 0, "gate", 0)
    hidden = t0.shape[0] // (16 * t0.k)
    has_shared = by_rank[0].half(a.layer, "shared", "gate", 0) is not None

    if device:
        import torch
        xs = seeded_input(a.seed, hidden) if a.seed is not None else None
        if xs is None:
            import numpy as np
            xs = np.fromfile(a.input, dtype="<f4").astype(np.float64).tolist()
        x_host = torch.tensor(xs, dtype=torch.float32).double()
    else:
        import numpy as np
        if a.seed is not None:
            x_host = np.array(seeded_input(a.seed, hidden), dtype=np.float32).astype(np.float64)
        else:
            x_host = np.fromfile(a.input, dtype="<f4").astype(np.float64)
    if len(x_host) != hidden:
        raise SystemExit(f"moe_layer.py: --input {a.input}: {len(x_host)} floats, the layer's hidden size is {hidden}")

    import numpy as np
    out = np.zeros((experts + 1, hidden), dtype="<f4")
    for e in range(experts + 1):
        shared = e == experts
        if shared and not has_shared:
            break
        expert = "shared" if shared else e
        y = np.zeros(hidden, dtype=np.float64)
        for h in range(halves):
            lease, _ = owner(by_rank, a.layer, expert, "gate", h)
            w = [lease.half_weights(owner(by_rank, a.layer, expert, p, h)[1]) for p in ("gate", "up", "down")]
            if device:
                x = x_host.to(w[0].device)
                torch.cuda.current_stream(w[0].device).synchronize()
                g = x @ w[0].double()
                u = x @ w[1].double()
                y += ((g * torch.sigmoid(g) * u) @ w[2].double()).cpu().numpy()
            else:
                g = x_host @ w[0].astype(np.float64)
                u = x_host @ w[1].astype(np.float64)
                y += (g / (1.0 + np.exp(-g)) * u) @ w[2].astype(np.float64)
        out[e] = y.astype(np.float32)
        print(f"expert {'shared' if shared else e:<6} |y|max {np.abs(y).max():.6g}  "
              f"rms {math.sqrt(float((y * y).mean())):.6g}")
    out.tofile(a.out)
    print(f"moe_layer.py: {d.repo} {d.manifest} TP {d.tp} layer {a.layer}, {d.memory_kind} memory: {experts} "
          f"experts{' + shared' if has_shared else ' (no shared expert)'}, hidden {hidden}, from {len(by_rank)} "
          f"ranks -> {a.out}")
    for lease in by_rank:
        lease.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except exlr8.Error as e:
        print(f"moe_layer.py: {e}", file=sys.stderr)
        sys.exit(1)
