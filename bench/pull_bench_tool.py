#!/usr/bin/env python3
"""Helpers for bench/pull_bench.sh (standard library only).

  curl-config PLAN BASE OUTDIR     curl config fetching exactly the plan's
                                   requests from BASE/<path>, one output file
                                   per request; prints "requests bytes" on stderr
  half-log PLAN LOG START_UNIX     reads an nginx access log written with
                                   log_format '$msec "$uri" "$http_range" $status $body_bytes_sent'
                                   and prints JSON: seconds from START to the
                                   first request of one of the plan's halves,
                                   half requests seen, their rate (first to last)
  get FILE KEY                     prints a top-level key of a JSON file
  best N...                        prints the smallest number
"""
import json
import sys


def curl_config(plan_path, base, outdir):
    plan = json.load(open(plan_path))
    n = 0
    total = 0
    out = sys.stdout
    for f in plan["files"]:
        # Paths of a synthesized release are plain ASCII without spaces or quotes.
        url = base + "/" + f["path"]
        for offset, length in f["requests"]:
            if n:
                out.write("next\n")
            out.write('url = "%s"\nrange = "%d-%d"\noutput = "%s/file.%d"\n' % (url, offset, offset + length - 1, outdir, n))
            n += 1
            total += length
    print(n, total, file=sys.stderr)


def half_log(plan_path, log_path, start):
    plan = json.load(open(plan_path))
    halves = set()
    for f in plan["files"]:
        for r in f.get("ranges", []):
            if r.get("what") != "header":
                halves.add((f["path"], r["offset"]))
    first = last = None
    count = 0
    statuses = {}
    for line in open(log_path):
        parts = line.split('"')
        if len(parts) < 5:
            continue
        t = float(parts[0])
        path = parts[1].lstrip("/")
        rng = parts[3]
        statuses[parts[4].split()[0]] = statuses.get(parts[4].split()[0], 0) + 1
        if not rng.startswith("bytes="):
            continue
        try:
            offset = int(rng[6:].split("-")[0])
        except ValueError:
            continue
        if (path, offset) in halves:
            count += 1
            first = t if first is None else min(first, t)
            last = t if last is None else max(last, t)
    result = {
        "plan_halves": len(halves),
        "half_requests": count,
        "first_half_s": None if first is None else round(first - start, 3),
        "half_requests_per_s": round((count - 1) / (last - first), 1) if count > 1 and last > first else None,
        "statuses": statuses,
    }
    print(json.dumps(result))


def main(argv):
    if len(argv) >= 5 and argv[1] == "curl-config":
        curl_config(argv[2], argv[3], argv[4])
    elif len(argv) >= 5 and argv[1] == "half-log":
        half_log(argv[2], argv[3], float(argv[4]))
    elif len(argv) >= 4 and argv[1] == "get":
        v = json.load(open(argv[2]))[argv[3]]
        print(json.dumps(v) if isinstance(v, (dict, list)) else v)
    elif len(argv) >= 3 and argv[1] == "best":
        print(min(float(x) for x in argv[2:]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
