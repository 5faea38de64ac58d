#!/usr/bin/python3
# The report of tools/bench-plan: reads the files a run left in its work directory and
# prints a table, then one JSON line (the tool's last line).
#   bench-plan-report.py one-peer WORK WARMUP LOAD SHAPE...
#   bench-plan-report.py netns-gflops WORK WARMUP PEERS    # prints one GFLOP/s figure
#   bench-plan-report.py netns WORK WARMUP LOAD PEERS CORES CODEC
#   bench-plan-report.py ckpt WORK WARMUP LOAD RUN...       # RUN: SHAPE-PEERS
# Files (NAME.log is a command's output, its last line JSON for bench and plan):
# NAME.bench.log, NAME.plan.log, NAME.jsonl or NAME.rank<R>.jsonl (train --metrics),
# NAME.log (train's log: checkpoint lines), NAME.ckpt/ (checkpoints).
import json
import os
import re
import statistics
import sys

STEP_TOLERANCE = 0.15  # plan's step time within 15% of measured
WAIT_FRACTION = 0.10  # ckpt_wait_ms at most 10% of the median step
CKPT_EVERY = 2  # tools/bench-plan's --ckpt-every


def last_json(work, name):
    with open(f"{work}/{name}.log") as f:
        return json.loads(f.read().strip().splitlines()[-1])


def metrics(work, name, rank=None):
    path = f"{work}/{name}.jsonl" if rank is None else f"{work}/{name}.rank{rank}.jsonl"
    with open(path) as f:
        return [m for m in map(json.loads, filter(str.strip, f)) if m.get("step", 0) > 0]


def timed(ms, warmup):
    kept = [m for m in ms if m["step"] > warmup]
    if not kept:
        sys.exit(f"bench-plan: no step after WARMUP={warmup} in the metrics")
    return kept


def verdict(ok):
    return "PASS" if ok else "FAIL"


def one_peer(work, warmup, load, shapes):
    rows = []
    for s in shapes:
        bench, plan = last_json(work, f"{s}.bench"), last_json(work, f"{s}.plan")
        train = timed(metrics(work, s), warmup)
        measured = statistics.median(m["step_ms"] for m in train)
        predicted = plan["balanced_step_s"] * 1e3
        ratio = measured / predicted
        rows.append({"shape": s, "params": plan["params"], "vocab": bench["vocab"],
                     "precision": bench["precision"], "threads": bench["threads"],
                     "recompute": bench["recompute"], "achieved_gflops": bench["achieved_gflops"],
                     "bench_step_ms": bench["step_ms"], "plan_step_ms": round(predicted, 1),
                     "train_step_ms": round(measured, 1),
                     "train_compute_ms": round(statistics.median(m["compute_ms"] for m in train), 1),
                     "steps_timed": len(train), "ratio": round(ratio, 4),
                     "pass": abs(ratio - 1) <= STEP_TOLERANCE})
    print(f"{'shape':<7}{'params':>9}{'vocab':>7} {'prec':<5}{'thr':>4}{'GFLOP/s':>9}"
          f"{'bench ms':>10}{'plan ms':>10}{'train ms':>10}{'train/plan':>11}")
    for r in rows:
        print(f"{r['shape']:<7}{r['params'] / 1e6:>8.1f}M{r['vocab']:>7} {r['precision']:<5}"
              f"{r['threads']:>4}{r['achieved_gflops']:>9.1f}{r['bench_step_ms']:>10.1f}"
              f"{r['plan_step_ms']:>10.1f}{r['train_step_ms']:>10.1f}{r['ratio']:>11.3f}  "
              f"{verdict(r['pass'])}")
    print(f"plan: tokens x FLOPs per token / bench compute's achieved GFLOP/s, i.e. bench "
          f"compute's own step\n(forward, backward, AdamW, --recompute included); train: "
          f"median step_ms after step {warmup}, which adds\nreading windows, the gradient "
          f"norm and the parameter hash. PASS: within {STEP_TOLERANCE:.0%}. Load average "
          f"before: {load}.")
    if any(r["vocab"] < 32000 for r in rows if r["shape"] in ("124m", "1b")):
        print("note: the bundled sample yields a smaller vocabulary than 32000; plan and "
              "bench used the data's, so parameters are fewer than the named shape's")
    print(json.dumps({"bench": "plan", "mode": "one-peer", "tolerance": STEP_TOLERANCE,
                      "load_before": load, "shapes": rows,
                      "pass": all(r["pass"] for r in rows)}))


def ring_steps(work, name, peers, warmup):
    """Per step after WARMUP: rank 0's metrics and the slowest peer's compute_ms."""
    ranks = [{m["step"]: m for m in metrics(work, name, r)} for r in range(peers)]
    common = sorted(set.intersection(*(set(r) for r in ranks)))
    steps = [s for s in common if s > warmup]
    if not steps:
        sys.exit(f"bench-plan: no step after WARMUP={warmup} common to all {peers} peers")
    return [(ranks[0][s], max(r[s]["compute_ms"] for r in ranks)) for s in steps]


def netns_gflops(work, warmup, peers):
    plan = last_json(work, "share.plan")
    slowest_ms = statistics.median(c for _, c in ring_steps(work, "ring", peers, warmup))
    seq_flops = plan["tokens_per_step"] / peers * plan["flops_per_token"]  # one peer's share
    print(f"{seq_flops / (slowest_ms * 1e-3) / 1e9:.2f}")


def netns(work, warmup, load, peers, cores, codec):
    bench = last_json(work, "share.bench")
    plans = {"share": last_json(work, "share.plan"), "seen": last_json(work, "seen.plan")}
    steps = ring_steps(work, "ring", peers, warmup)
    measured = statistics.median(m["step_ms"] for m, _ in steps)
    compute = statistics.median(c for _, c in steps)
    comm = statistics.median(m["comm_ms"] for m, _ in steps)
    sent = statistics.median(m["bytes_sent"] for m, _ in steps)
    wire = next(c["wire_bytes"] for c in plans["share"]["codecs"] if c["codec"] == codec)
    rows = {}
    for k, p in plans.items():
        step_ms, compute_ms = p["equal_step_s"] * 1e3, p["compute_s"] * 1e3
        rows[k] = {"gflops_per_peer": p["peer_gflops"][0], "plan_compute_ms": round(compute_ms, 1),
                   "plan_comm_ms": round(step_ms - compute_ms, 1), "plan_step_ms": round(step_ms, 1),
                   "ratio": round(measured / step_ms, 4),
                   "pass": abs(measured / step_ms - 1) <= STEP_TOLERANCE}
    print(f"{peers} peers in network namespaces, links 1 Gbit/s, small shape, 1 thread each, "
          f"--balance off, --compress {codec} (plan's suggestion)")
    print(f"bench compute alone {bench['achieved_gflops']:.1f} GFLOP/s. Measured (medians after "
          f"step {warmup}): step {measured:.1f} ms (rank 0),\nslowest peer's compute_ms "
          f"{compute:.1f}, comm_ms {comm:.1f} (rank 0: the exchange not hidden), "
          f"{sent / 1e6:.2f} MB sent (plan {wire / 1e6:.2f} MB)")
    print(f"{'plan given':<30}{'GFLOP/s/peer':>13}{'compute ms':>11}{'comm ms':>9}{'step ms':>9}"
          f"{'measured/plan':>15}")
    labels = {"share": f"alone x {min(cores, peers)}/{peers} per peer",
              "seen": "compute seen in the ring"}
    for k, r in rows.items():
        print(f"{labels[k]:<30}{r['gflops_per_peer']:>13.1f}{r['plan_compute_ms']:>11.1f}"
              f"{r['plan_comm_ms']:>9.1f}{r['plan_step_ms']:>9.1f}{r['ratio']:>15.3f}  "
              f"{verdict(r['pass'])}")
    shared = peers > cores
    if shared:
        print(f"Said plainly: {peers} peers share {cores} cores here, so no peer computes at "
              f"the speed bench compute measured alone,\nand the first row's verdict means "
              f"little: it guesses each peer's part ({cores}/{peers} of a core), which "
              f"time-sharing,\nthe communication threads and other processes (load average "
              f"before: {load}) change. The second row\ngives plan the compute the peers had "
              f"(the slowest peer's median compute_ms): it checks plan's communication\n"
              f"model alone. On a fleet (one peer per machine) pass bench compute's figure.")
    print(json.dumps({"bench": "plan", "mode": "netns", "peers": peers, "cores": cores,
                      "link_mbps": 1000, "codec": codec, "tolerance": STEP_TOLERANCE,
                      "load_before": load, "alone_gflops": bench["achieved_gflops"],
                      "measured_step_ms": round(measured, 1), "compute_ms": round(compute, 1),
                      "comm_ms": round(comm, 1), "bytes_sent": sent,
                      "plan_wire_bytes": round(wire), "plan_alone_share": rows["share"],
                      "plan_seen_compute": rows["seen"], "cores_shared": shared,
                      "pass": None if shared else rows["share"]["pass"]}))


CKPT_LINE = re.compile(r"checkpoint step (\d+) \(epoch \d+\) written to .* in (\d+) ms(, beside training)?")


def ckpt(work, warmup, load, runs):
    rows = []
    for run in runs:
        shape, peers = run.rsplit("-", 1)
        ms = metrics(work, run, 0 if int(peers) > 1 else None)
        median = statistics.median(m["step_ms"] for m in timed(ms, warmup))
        after = [m["ckpt_wait_ms"] for m in ms if m["step"] > CKPT_EVERY and m["step"] % CKPT_EVERY == 1]
        beside, final = [], []
        with open(f"{work}/{run}.log") as f:
            for line in f:
                hit = CKPT_LINE.search(line)
                if hit and (int(peers) == 1 or line.startswith("[r0]")):
                    (beside if hit.group(3) else final).append(int(hit.group(2)))
        dirs = sorted(d for d in os.listdir(f"{work}/{run}.ckpt") if d.startswith("step-"))
        size = sum(os.path.getsize(os.path.join(p, f)) for p, _, fs in
                   os.walk(f"{work}/{run}.ckpt/{dirs[-1]}") for f in fs) if dirs else 0
        wait_max = max(after, default=0.0)
        r = {"run": run, "shape": shape, "peers": int(peers), "step_ms": round(median, 1),
             "ckpt_wait_ms_max": round(wait_max, 1),
             "ckpt_wait_ms_mean": round(statistics.mean(after), 2) if after else 0.0,
             "waits": len(after), "wait_over_step": round(wait_max / median, 4),
             "ckpt_bytes": size, "write_ms_beside": beside, "write_ms_final": final}
        if shape == "ckpt":
            r["pass"] = bool(after) and wait_max <= WAIT_FRACTION * median
        rows.append(r)
    print(f"{'run':<9}{'peers':>6}{'step ms':>9}{'wait max':>10}{'mean':>8}{'max/step':>10}"
          f"{'ckpt MB':>9}{'writes beside (ms)':>20}{'final':>7}")
    for r in rows:
        w = r["write_ms_beside"]
        writes = f"{min(w)}-{max(w)} (x{len(w)})" if w else "none"
        print(f"{r['run']:<9}{r['peers']:>6}{r['step_ms']:>9.1f}{r['ckpt_wait_ms_max']:>10.1f}"
              f"{r['ckpt_wait_ms_mean']:>8.2f}{100 * r['wait_over_step']:>9.2f}%{r['ckpt_bytes'] / 1e6:>9.1f}"
              f"{writes:>20}{','.join(map(str, r['write_ms_final'])) or '-':>7}"
              + (f"  {verdict(r['pass'])}" if "pass" in r else ""))
    print(f"wait: ckpt_wait_ms of the steps after a checkpoint (rank 0 on a ring: the leader "
          f"writes); PASS (ckpt shape):\nthe largest at most {WAIT_FRACTION:.0%} of the median "
          f"step after step {warmup}. 'final': the last checkpoint, written in line, as every\n"
          f"checkpoint was before they were written beside training. Load average before: "
          f"{load}.")
    judged = [r["pass"] for r in rows if "pass" in r]
    print(json.dumps({"bench": "plan", "mode": "ckpt", "ckpt_every": CKPT_EVERY,
                      "wait_fraction": WAIT_FRACTION, "load_before": load, "runs": rows,
                      "pass": all(judged) if judged else None}))


def main():
    mode, work, warmup = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "one-peer":
        one_peer(work, warmup, sys.argv[4], sys.argv[5:])
    elif mode == "netns-gflops":
        netns_gflops(work, warmup, int(sys.argv[4]))
    elif mode == "netns":
        netns(work, warmup, sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), sys.argv[7])
    elif mode == "ckpt":
        ckpt(work, warmup, sys.argv[4], sys.argv[5:])
    else:
        sys.exit(f"bench-plan-report: unknown mode {mode}")


if __name__ == "__main__":
    main()
