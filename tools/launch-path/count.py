#!/usr/bin/env python3
"""Counts the calls between the daemon's files in each traced window.

count.py TESSERAD TRACE: TRACE holds call_trace.c's records (its roots'
entries and exits, with every instrumented call below them). A call counts as a
crossing when the callee is defined in a .c file other than its caller's; a
function defined in a header (static inline) is passed through, its calls
charged to the .c function that called it. The launch windows are those that
ran a launch handler and the backend on the loop thread (a launch served on
the loop); their counts are printed, up to the reply's send (the call into the
transport's server_reply, included) and whole, and the last one's calls listed,
with those a device worker made for it (worker_serve windows that began while
it ran) counted beside them.
"""
import collections
import struct
import subprocess
import sys


def symbols(exe, offsets):
    out = subprocess.run(["addr2line", "-f", "-e", exe] + ["%x" % o for o in offsets],
                         check=True, capture_output=True, text=True).stdout.split("\n")
    names = {}
    for i, off in enumerate(offsets):
        fn, where = out[2 * i], out[2 * i + 1]
        path = where.rsplit(":", 1)[0]
        # Relative to the tree: daemon/serve/dispatch.c, not an absolute path.
        for top in ("daemon/", "lib/", "client/", "kernels/"):
            if top in path:
                path = path[path.rindex(top):]
                break
        names[off] = (fn, path)
    return names


def windows(records):
    """(first record's index, last record's index, events) of every window."""
    by_thread = collections.defaultdict(list)
    for i, (kind, tid, off) in enumerate(records):
        by_thread[tid].append((i, kind, off))
    out = []
    for tid, events in by_thread.items():
        depth, cur = 0, []
        for i, kind, off in events:
            cur.append((i, kind, off))
            depth += 1 if kind == ord("E") else -1
            if depth == 0:
                out.append((cur[0][0], cur[-1][0], [(k, o) for _, k, o in cur]))
                cur = []
        if cur:
            sys.exit("count.py: a window on thread %d has no end (a record lost?)" % tid)
    return sorted(out)


def crossings(window, names):
    stack, calls = [], []
    for kind, off in window:
        fn, path = names[off]
        if kind == ord("X"):
            stack.pop()
            continue
        caller = next((f for f in reversed(stack) if f[1].endswith(".c")), None)
        if caller is not None and path.endswith(".c") and path != caller[1]:
            calls.append((caller[1], path, fn))
        stack.append((fn, path))
    return calls


def main():
    exe, trace = sys.argv[1], sys.argv[2]
    data = open(trace, "rb").read()
    records = [struct.unpack_from("<IIQ", data, i) for i in range(0, len(data), 16)]
    names = symbols(exe, sorted({r[2] for r in records}))
    launches, worker = [], []
    all_windows = windows(records)
    for start, end, w in all_windows:
        root = names[w[0][1]][0]
        files = {names[off][1] for _, off in w}
        if root == "worker_serve":
            worker.append((start, crossings(w, names)))
        elif any(f.startswith("daemon/handlers/launch.c") for f in files) and \
                any(f.startswith("daemon/backend/") for f in files):
            launches.append((start, end, crossings(w, names)))
    if not launches:
        sys.exit("count.py: no launch was served on the loop in this trace")
    def to_send(calls):
        ends = [i for i, c in enumerate(calls) if c[2] == "server_reply"]
        return ends[0] + 1 if ends else len(calls)
    print("launches served on the loop: %d" % len(launches))
    print("file crossings up to the reply's send (count: launches): %s" %
          sorted(collections.Counter(to_send(c) for _, _, c in launches).items()))
    print("file crossings in all (count: launches): %s" %
          sorted(collections.Counter(len(c) for _, _, c in launches).items()))
    start, end, last = launches[-1]
    in_worker = [c for ws, c in worker if start <= ws <= end]
    files = []
    for caller, callee, _ in last:
        for f in (caller, callee):
            if f not in files:
                files.append(f)
    print("the last one: %d crossings through %d files, %d of them up to the send" %
          (len(last), len(files), to_send(last)))
    for i, (caller, callee, fn) in enumerate(last, 1):
        print("%3d  %-32s -> %-32s %s" % (i, caller, callee, fn))
    if in_worker:
        calls = [c for w in in_worker for c in w]
        print("in the device worker for it: %d crossings (%d messages)" % (len(calls),
                                                                          len(in_worker)))
        for i, (caller, callee, fn) in enumerate(calls, 1):
            print("%3d  %-32s -> %-32s %s" % (i, caller, callee, fn))


main()
