"""Figures of one tools/bench-equal-time run from its peers' --metrics files, and the
Markdown table of all modes (the tool's reading and reporting, apart from its running).

Window of a run: steps 2 .. the last step (per-step sync) or the last round's end before
the final round (round sync: that round drains its exchange); tokens/s = the window's
tokens / the wall time between its metrics lines; compute-only = the same tokens / the sum
of its steps' compute_ms; bytes per token = every peer's bytes_sent / tokens trained on.
"""
import json
import os

def read_metrics(path):
    """Metric lines of one peer's --metrics file, by step (training steps only)."""
    by = {}
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    m = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line being written
                if "time" in m and m.get("step", 0) > 0 and m.get("loss") is not None:
                    by[m["step"]] = m
    except FileNotFoundError:
        pass
    return by


def mean(xs):
    return sum(xs) / len(xs)


def step_seconds(by, steps):
    """Wall seconds of each listed step: between its metrics line and the previous one."""
    return [by[s]["time"] - by[s - 1]["time"] for s in steps if s in by and s - 1 in by]


def summarize(mode, out, steps, peers):
    by = read_metrics(os.path.join(out, "run.rank0.jsonl"))
    if steps not in by or 1 not in by:
        raise RuntimeError(f"peer 0's metrics do not reach step {steps} (see {out}/run.log)")
    if mode.kind == "round":
        last = ((steps - 1) // mode.every) * mode.every
    else:
        last = steps
    window = [s for s in range(2, last + 1) if s in by]
    missing = (last - 1) - len(window)
    tokens = by[last]["tokens"] - by[1]["tokens"]
    wall = by[last]["time"] - by[1]["time"]
    compute = sum(by[s]["compute_ms"] for s in window) / 1e3
    start = by[1]["time"] - by[1]["step_ms"] / 1e3
    train_s = by[steps]["time"] - start
    sent = 0
    for r in range(peers):
        sent += sum(m.get("bytes_sent", 0) for m in read_metrics(os.path.join(out, f"run.rank{r}.jsonl")).values())
    final_tokens = by[steps]["tokens"]
    return {
        "steps": steps,
        "train_minutes": round(train_s / 60, 3),
        "tokens": final_tokens,
        "tokens_per_s": round(tokens / wall, 1) if wall > 0 else None,
        "run_tokens_per_s": round(final_tokens / train_s, 1),
        "compute_only_tokens_per_s": round(tokens / compute, 1) if compute > 0 else None,
        "share_computing": round(compute / wall, 3) if wall > 0 else None,
        "bytes_per_token": round(sent / final_tokens, 1),
        "window": [2, last],
        "steps_missing": missing,
        "view_epochs": sorted({m["epoch"] for m in by.values()}),
        "final_train_loss": round(by[steps]["loss"], 4),
    }


def fmt(v, spec):
    return "–" if v is None else format(v, spec)


def table(results, minutes):
    lines = [
        f"| mode | steps | minutes (budget {minutes:g}) | tokens/s | compute-only | computing | "
        "bytes/token | val loss | plan tokens/s | measured/plan |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['label']} | failed: {r['error']} | | | | | | | | |")
            continue
        loss = f"{r['val_loss']:.4f}" if r["val_loss"] < 100 else f"{r['val_loss']:.3g} (diverged)"
        plan = fmt(r.get("plan_tokens_per_s"), ",.0f")
        if r.get("plan_row") and r["mode"] == "step:auto":
            plan += f" (row {r['plan_row'].replace('--compress ', '')})"
        lines.append(
            f"| {r['label']} | {r['steps']} | {r['train_minutes']:.2f} | {fmt(r['tokens_per_s'], ',.0f')} | "
            f"{fmt(r['compute_only_tokens_per_s'], ',.0f')} | {fmt(r['share_computing'] and 100 * r['share_computing'], '.1f')}% | "
            f"{r['bytes_per_token']:,.0f} | {loss} | {plan} | {fmt(r.get('measured_over_plan'), '.2f')} |")
    return "\n".join(lines)
