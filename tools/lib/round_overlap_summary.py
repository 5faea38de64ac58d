"""Summary of one round-sync run for tools/bench-round-overlap: peer 0's --metrics file.

Window: steps 2 .. the last round's end before the final round (the final round of an
overlapped run drains both exchanges, which a long run amortises). Prints one JSON line:
tokens/s over the window's wall time, the compute-only rate (the window's tokens / the sum
of its compute_ms), their ratio, and the time spent at each round's end (outer_ms: the
exchange not hidden).
"""
import json
import sys


def main():
    path, every, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    lines = [json.loads(l) for l in open(path) if l.strip()]
    by = {m["step"]: m for m in lines if "time" in m and m.get("step", 0) > 0}
    last_full = ((steps - 1) // every) * every
    first = by[1]
    end = by[last_full]
    tokens = end["tokens"] - first["tokens"]
    wall_s = end["time"] - first["time"]
    window = [s for s in range(2, last_full + 1) if s in by]
    # Steps without a line of peer 0 (it received another peer's state after a view
    # change): the run is not a clean measurement, and says so.
    missing = last_full - 1 - len(window)
    epochs = sorted({m["epoch"] for m in by.values()})
    compute_s = sum(by[s]["compute_ms"] for s in window) / 1e3
    outer = [round(by[s]["outer_ms"]) for s in window if by[s].get("outer_ms", -1) >= 0]
    print(json.dumps({
        "run": path.split("/")[-1].replace(".rank0.jsonl", ""),
        "tokens_per_s": round(tokens / wall_s, 1),
        "compute_only_tokens_per_s": round(tokens / compute_s, 1),
        "share_computing": round(compute_s / wall_s, 3),
        "outer_ms_at_round_ends": outer,
        "outer_bytes": end.get("outer_bytes"),
        "view_epochs": epochs,
        "steps_missing": missing,
    }))


if __name__ == "__main__":
    main()
