#!/usr/bin/env python3
"""Soak test of clchat's line mode: many chat turns through one process.

Feeds TURNS user lines one at a time to `clchat -m MODEL --device DEVICE -c CTX
-n MAX_TOKENS --verbose --cl-object-counts` and waits for each reply's
statistics line and OpenCL object counts on stderr, so with a small context
the KV cache fills and the oldest turns are dropped again and again. Checks
that every turn is answered (a statistics line, a reply on stdout, no error
line), that the process exits 0 when stdin closes, that no OpenCL object
leaks (the live buffers, kernels, programs, events, queues and contexts after
the last turn are those after turn BASELINE, and none is left at exit), and
that resident memory does not grow: RSS is read after every turn, and its
peak over the last BASELINE turns must be within RSS_PCT percent of its peak
over the BASELINE turns after turn BASELINE, so that a single reading taken
while the driver compiles a kernel (PoCL runs LLVM in-process) does not
decide. The per-turn readings go to --rss-csv. Prints the figures; exits 1 on
a failure.

  tests/soak/soak_line_mode.py --binary build/clchat \
      --model ../shared/models/stories260K.gguf --turns 1000
"""
import argparse
import queue
import re
import subprocess
import sys
import threading
import time

ANIMALS = ["cat", "dog", "bird", "fish", "frog", "bear", "duck", "lion"]


def prompt(i):
    # Different lengths and words, so prefill and trimming vary from turn to turn.
    extra = " and then what happened next" * (i % 4)
    return f"Tell me story {i} about a {ANIMALS[i % len(ANIMALS)]}{extra}."


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


CL_COUNTS_RE = re.compile(r"^\[cl objects (at exit )?live (.*) \| created (\d+) released (\d+)\]")


def parse_cl_counts(line):
    """The fields of a --cl-object-counts line, or None for another line."""
    m = CL_COUNTS_RE.match(line)
    if not m:
        return None
    words = m.group(2).split()
    live = {words[k]: int(words[k + 1]) for k in range(0, len(words), 2)}
    return {"at_exit": bool(m.group(1)), "live": live,
            "created": int(m.group(3)), "released": int(m.group(4))}


def check_cl_counts(cl_counts, baseline, turns):
    """Live objects after the last turn equal those after `baseline`; none at exit."""
    failures = []
    base, last, at_exit = cl_counts.get(baseline), cl_counts.get(turns), cl_counts.get(0)
    if base is None or last is None:
        return ["no OpenCL object counts after turns %d and %d" % (baseline, turns)]
    print(f"soak: OpenCL objects live after turn {baseline}: {base['live']}; "
          f"after turn {turns}: {last['live']}; created {last['created']}, "
          f"released {last['released']} by then")
    if last["live"] != base["live"]:
        failures.append(f"OpenCL objects leaked: live {base['live']} after turn {baseline}, "
                        f"{last['live']} after turn {turns}")
    if at_exit is None:
        failures.append("no OpenCL object counts at exit")
    else:
        print(f"soak: OpenCL objects at exit: created {at_exit['created']}, "
              f"released {at_exit['released']}")
        left = {k: v for k, v in at_exit["live"].items() if v != 0}
        if left or at_exit["created"] != at_exit["released"]:
            failures.append(f"OpenCL objects not released at exit: {left}")
    return failures


def reader(stream, q):
    for line in iter(stream.readline, b""):
        q.put(line.decode("utf-8", "replace"))
    q.put(None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default="build/clchat")
    ap.add_argument("--model", default="../shared/models/stories260K.gguf")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=80)
    ap.add_argument("--baseline", type=int, default=50, help="turn whose RSS is the reference")
    ap.add_argument("--rss-pct", type=float, default=5.0)
    ap.add_argument("--rss-csv", help="write turn,rss_kib per turn here")
    ap.add_argument("--turn-timeout", type=float, default=120.0, help="seconds per turn")
    a = ap.parse_args()

    cmd = [a.binary, "-m", a.model, "--device", a.device, "-c", str(a.ctx),
           "-n", str(a.max_tokens), "--verbose", "--cl-object-counts"]
    print("soak:", " ".join(cmd), f"({a.turns} turns)", flush=True)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    out_q, err_q = queue.Queue(), queue.Queue()
    threading.Thread(target=reader, args=(p.stdout, out_q), daemon=True).start()
    threading.Thread(target=reader, args=(p.stderr, err_q), daemon=True).start()

    failures = []
    trims = 0
    decoded = 0
    rss = {}
    cache_full_turns = 0
    stats_re = re.compile(r"^\[prefill (\d+) tok .* decode (\d+) tok .* cache (\d+)/(\d+)\]")
    cl_counts = {}  # turn (0: at exit) -> the counts line's fields

    def next_err(deadline):
        try:
            return err_q.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None

    # The ready line: "[model type | device | backend | ctx N | template T]".
    # Lines before it come from the OpenCL compiler (PoCL prints "N warnings
    # generated." when it builds the kernels with a cold cache).
    deadline = time.monotonic() + a.turn_timeout
    line = next_err(deadline)
    while line is not None and not line.startswith("[") and not line.startswith("clchat:"):
        line = next_err(deadline)
    if line is None or not line.startswith("["):
        print(f"soak: FAILED: no ready line (got {line!r})")
        p.kill()
        return 1

    for i in range(1, a.turns + 1):
        p.stdin.write((prompt(i) + "\n").encode())
        p.stdin.flush()
        deadline = time.monotonic() + a.turn_timeout
        while True:
            line = next_err(deadline)
            if line is None:
                failures.append(f"turn {i}: no statistics line within {a.turn_timeout} s")
                break
            if line.startswith("clchat: context full"):
                trims += 1
                continue
            m = stats_re.match(line)
            if m:
                decoded += int(m.group(2))
                if int(m.group(3)) == int(m.group(4)):
                    cache_full_turns += 1
                continue  # the object counts follow
            counts = parse_cl_counts(line)
            if counts is not None and not counts["at_exit"]:
                cl_counts[i] = counts
                break
            failures.append(f"turn {i}: {line.strip()}")
        if failures:
            break
        reply = []
        while not out_q.empty():
            chunk = out_q.get()
            if chunk is not None:
                reply.append(chunk)
        if not "".join(reply).strip():
            # The reply is flushed before the statistics line; give the pipe a moment.
            try:
                chunk = out_q.get(timeout=5)
                reply.append(chunk or "")
            except queue.Empty:
                pass
        if not "".join(reply).strip():
            failures.append(f"turn {i}: empty reply")
            break
        rss[i] = rss_kib(p.pid)

    p.stdin.close()
    try:
        rc = p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = "hung after stdin closed"
    if rc != 0:
        failures.append(f"exit status {rc}")
    seconds = time.monotonic() - t0
    while (line := next_err(time.monotonic() + 5)) is not None:
        counts = parse_cl_counts(line)
        if counts is not None and counts["at_exit"]:
            cl_counts[0] = counts

    print(f"soak: {a.turns} turns in {seconds:.0f} s, {decoded} tokens decoded, "
          f"context trimmed {trims} times, cache full after {cache_full_turns} turns")
    if a.rss_csv:
        with open(a.rss_csv, "w") as f:
            f.write("turn,rss_kib\n" + "".join(f"{t},{v}\n" for t, v in sorted(rss.items())))
    b = a.baseline
    if len(rss) == a.turns and a.turns >= 3 * b:
        early = max(rss[t] for t in range(b, 2 * b))
        late = max(rss[t] for t in range(a.turns - b + 1, a.turns + 1))
        growth = 100.0 * (late - early) / early
        print(f"soak: RSS after turn {b}: {rss[b] / 1024:.1f} MiB, after turn {a.turns}: "
              f"{rss[a.turns] / 1024:.1f} MiB; peak over turns {b}-{2 * b - 1}: "
              f"{early / 1024:.1f} MiB, over the last {b}: {late / 1024:.1f} MiB ({growth:+.2f}%); "
              f"min/max over all turns {min(rss.values()) / 1024:.1f}/"
              f"{max(rss.values()) / 1024:.1f} MiB")
        if growth > a.rss_pct:
            failures.append(f"RSS grew {growth:.2f}% (limit {a.rss_pct}%)")
    elif not failures:
        failures.append(f"too few turns ({a.turns}) for the RSS check (at least {3 * b})")
    failures += check_cl_counts(cl_counts, b, a.turns)
    for f in failures:
        print("soak: FAILED:", f)
    print("soak:", "1 passed, 0 failed" if not failures else "0 passed, 1 failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
