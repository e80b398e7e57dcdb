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
  disk-sample STAT                 prints "time sectors_read sectors_written
                                   requests_in_flight" every 10 ms from a
                                   /sys/class/block/DEV/stat file until killed
  timeline LOG DISK T0 T1 LABEL    a timeline in 100 ms steps from T0 to T1:
                                   MB nginx served and answers it ended (its
                                   log written with log_format '$msec
                                   $request_time $body_bytes_sent "$uri"'),
                                   their mean and largest $request_time, and
                                   MB the disk read and wrote (disk-sample)
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


def disk_sample(stat_path):
    # Kept in memory and written at the end: a write to a file on the disk
    # being measured can wait behind the journal commits the run causes.
    import signal
    import time
    samples = []

    def dump(*_):
        sys.stdout.write("".join("%.4f %s %s %s\n" % s for s in samples))
        sys.stdout.flush()
        sys.exit(0)

    signal.signal(signal.SIGTERM, dump)
    first = True
    while True:
        with open(stat_path) as f:
            v = f.read().split()
        samples.append((time.time(), v[2], v[6], v[8]))
        if first:  # tells the caller that sampling has begun
            sys.stderr.write("sampling\n")
            sys.stderr.flush()
            first = False
        time.sleep(0.01)


def timeline(log_path, disk_path, t0, t1, label):
    step = 0.1
    n = int((t1 - t0) / step) + 1
    served = [0] * n
    ended = [0] * n
    rt_sum = [0.0] * n
    rt_max = [0.0] * n
    for line in open(log_path):
        parts = line.split()
        if len(parts) < 3:
            continue
        try:
            t, rt, sent = float(parts[0]), float(parts[1]), int(parts[2])
        except ValueError:
            continue
        i = int((t - t0) / step)
        if 0 <= i < n:
            served[i] += sent
            ended[i] += 1
            rt_sum[i] += rt
            rt_max[i] = max(rt_max[i], rt)
    read = [0] * n
    written = [0] * n
    inflight = [0] * n
    samples = []
    for line in open(disk_path):
        parts = line.split()
        if len(parts) == 4:
            samples.append((float(parts[0]), int(parts[1]), int(parts[2]), int(parts[3])))
    for (ta, ra, wa, _), (tb, rb, wb, q) in zip(samples, samples[1:]):
        i = int((tb - t0) / step)
        if 0 <= i < n:
            read[i] += (rb - ra) * 512
            written[i] += (wb - wa) * 512
            inflight[i] = max(inflight[i], q)
    print("timeline of %s (%.3f s): per %d ms, MB served by nginx, answers ended, their mean/max request_time,"
          " MB the disk read / wrote, most requests in flight on the disk" % (label, t1 - t0, step * 1000))
    for i in range(n):
        print("  %5.2f s %7.1f MB %5d ans  rt %6.1f / %6.1f ms  disk r %6.1f w %6.1f MB  q %3d" % (
            i * step, served[i] / 1e6, ended[i], 1000 * rt_sum[i] / ended[i] if ended[i] else 0.0,
            1000 * rt_max[i], read[i] / 1e6, written[i] / 1e6, inflight[i]))
    print("  total %.1f MB served in %d answers; disk read %.1f MB, wrote %.1f MB" % (
        sum(served) / 1e6, sum(ended), sum(read) / 1e6, sum(written) / 1e6))


def main(argv):
    if len(argv) >= 5 and argv[1] == "curl-config":
        curl_config(argv[2], argv[3], argv[4])
    elif len(argv) >= 5 and argv[1] == "half-log":
        half_log(argv[2], argv[3], float(argv[4]))
    elif len(argv) >= 3 and argv[1] == "disk-sample":
        disk_sample(argv[2])
    elif len(argv) >= 7 and argv[1] == "timeline":
        timeline(argv[2], argv[3], float(argv[4]), float(argv[5]), argv[6])
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
