// The dashboard page (see dashboard_page.h): HTML, CSS and JavaScript in one string.
#include "observe/dashboard_page.h"

namespace rt::observe {

const std::string& DashboardPage() {
  static const std::string page = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ringtrain</title>
<style>
:root { --bg:#f7f7f5; --fg:#1d1d1b; --mute:#6b6b66; --card:#fff; --line:#ddd;
        --ok:#2e7d32; --warn:#b26a00; --bad:#c62828;
        --c0:#1f77b4; --c1:#d62728; --c2:#2ca02c; --c3:#9467bd; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.4 system-ui, sans-serif; background:var(--bg); color:var(--fg); }
header { padding:12px 16px; background:#22252a; color:#fff; display:flex; flex-wrap:wrap;
         gap:8px 18px; align-items:baseline; }
header h1 { font-size:18px; margin:0 8px 0 0; }
.badge { padding:2px 8px; border-radius:10px; font-weight:600; background:#555; }
.badge.training { background:var(--ok); } .badge.paused, .badge.unreachable { background:var(--bad); }
.badge.joining, .badge.forming, .badge.changing, .badge.receiving_state { background:var(--warn); }
header .kv { color:#cfd3d8; } header .kv b { color:#fff; font-weight:600; }
main { padding:12px; display:grid; gap:12px; grid-template-columns:repeat(auto-fit, minmax(320px, 1fr)); }
section { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:10px 12px; min-width:0; }
section.wide { grid-column:1 / -1; }
h2 { font-size:14px; margin:0 0 6px; color:var(--mute); font-weight:600; }
svg { width:100%; height:auto; display:block; }
.axis { stroke:#999; stroke-width:1; } .grid { stroke:#eee; stroke-width:1; }
.tick { font-size:10px; fill:var(--mute); }
.legend { font-size:11px; fill:var(--fg); }
.scroll { overflow-x:auto; }
table { border-collapse:collapse; width:100%; font-size:13px; }
th, td { text-align:left; padding:4px 6px; border-bottom:1px solid var(--line); white-space:nowrap; }
th { color:var(--mute); font-weight:600; } td.num { text-align:right; font-variant-numeric:tabular-nums; }
tr.self td:first-child { font-weight:700; }
.st-training { color:var(--ok); } .st-paused, .st-unreachable { color:var(--bad); }
.st-joining, .st-forming, .st-changing, .st-receiving_state { color:var(--warn); }
ul.events { list-style:none; padding:0; margin:0; max-height:320px; overflow-y:auto; font-size:13px; }
ul.events li { padding:4px 0; border-bottom:1px solid var(--line); }
ul.events .t { color:var(--mute); font-variant-numeric:tabular-nums; margin-right:6px; }
ul.events .k { font-weight:600; margin-right:6px; }
.bar { display:flex; height:14px; border-radius:3px; overflow:hidden; background:#eee; }
.bar span { display:block; height:100%; }
.shares td { vertical-align:middle; } .shares td.bar-cell { width:60%; }
#error { color:var(--bad); padding:0 16px; }
footer { color:var(--mute); font-size:12px; padding:4px 16px 16px; }
</style>
</head>
<body>
<header>
  <h1>ringtrain</h1>
  <span id="state" class="badge" data-state="">loading</span>
  <span class="kv">epoch <b id="epoch">-</b></span>
  <span class="kv">leader <b id="leader">-</b></span>
  <span class="kv">peers <b id="peers">-</b></span>
  <span class="kv">step <b id="step">-</b></span>
  <span class="kv">loss <b id="loss">-</b></span>
  <span class="kv">val bpb <b id="bpb">-</b></span>
  <span class="kv">checkpoint <b id="ckpt">-</b></span>
</header>
<div id="error"></div>
<main>
  <section><h2>Loss (nats per token) by step</h2><svg id="loss-chart" data-points="0" viewBox="0 0 400 220"></svg></section>
  <section><h2>Validation bits per byte by step</h2><svg id="bpb-chart" data-points="0" viewBox="0 0 400 220"></svg></section>
  <section><h2>Tokens per second by step</h2><svg id="tps-chart" data-points="0" viewBox="0 0 400 220"></svg></section>
  <section><h2>Time of the last step per peer: compute / comm / waiting</h2>
    <div class="scroll"><table class="shares" id="shares"></table></div></section>
  <section class="wide"><h2>Peers</h2><div class="scroll"><table id="peer-table"></table></div></section>
  <section class="wide"><h2>Events (newest first)</h2><ul class="events" id="events"></ul></section>
</main>
<footer>Read-only view of <span id="self">this peer</span>, refreshed every 3 s from <code>/api/status</code>.
  Prometheus: <code>/metrics</code>.</footer>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const NS = "http://www.w3.org/2000/svg";
function el(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function fmt(x, digits) {
  if (x === null || x === undefined || !isFinite(x)) return "-";
  const a = Math.abs(x);
  if (digits !== undefined) return x.toFixed(digits);
  if (a >= 1e9) return (x / 1e9).toFixed(a >= 1e10 ? 0 : 1) + "G";
  if (a >= 1e6) return (x / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
  if (a >= 1e4) return (x / 1e3).toFixed(a >= 1e5 ? 0 : 1) + "k";
  if (a >= 100) return x.toFixed(0);
  if (a >= 1) return x.toFixed(2);
  return x.toPrecision(3);
}
// Tick values covering [lo, hi] at a 1-2-5 spacing, about n of them.
function ticks(lo, hi, n) {
  const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  let step = mag;
  for (const m of [1, 2, 5, 10]) { step = m * mag; if (step >= raw) break; }
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9 && out.length < 50; t += step) out.push(t);
  return out;
}
function bytes(b) {
  if (b === null || b === undefined) return "-";
  const u = ["B", "KB", "MB", "GB", "TB"]; let i = 0;
  while (b >= 1000 && i < u.length - 1) { b /= 1000; i++; }
  return b.toFixed(b >= 100 ? 0 : 1) + " " + u[i];
}
function ago(s) {
  if (s === null || s === undefined) return "-";
  if (s < 90) return s.toFixed(0) + " s ago";
  if (s < 5400) return (s / 60).toFixed(0) + " min ago";
  if (s < 129600) return (s / 3600).toFixed(1) + " h ago";
  return (s / 86400).toFixed(1) + " d ago";
}
// A line chart of series [{name, color, xs, ys}] into svg.
function chart(svg, series) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const W = 400, H = 220, L = 46, R = 14, T = 8, B = 22;
  let xs = [], ys = [];
  for (const s of series) s.xs.forEach((x, i) => { if (isFinite(s.ys[i]) && s.ys[i] !== null) { xs.push(x); ys.push(s.ys[i]); } });
  svg.setAttribute("data-points", series.length ? String(series[0].ys.filter((y) => y !== null && isFinite(y)).length) : "0");
  const last = series.length ? series[0].xs.filter((x, i) => series[0].ys[i] !== null && isFinite(series[0].ys[i])) : [];
  svg.setAttribute("data-last", last.length ? String(Math.max(...last)) : "");
  if (xs.length === 0) { svg.appendChild(el("text", {x: W / 2, y: H / 2, "text-anchor": "middle", class: "tick"}, "no data yet")); return; }
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) { y1 = y0 + Math.abs(y0) * 0.05 + 1e-9; y0 = y0 - Math.abs(y0) * 0.05; }
  const pad = (y1 - y0) * 0.05, nonneg = y0 >= 0; y0 -= pad; y1 += pad;
  if (nonneg && y0 < 0) y0 = 0;
  const px = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
  const py = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  for (const y of ticks(y0, y1, 4)) {
    const Y = py(y);
    svg.appendChild(el("line", {x1: L, x2: W - R, y1: Y, y2: Y, class: "grid"}));
    svg.appendChild(el("text", {x: L - 4, y: Y + 3, "text-anchor": "end", class: "tick"}, fmt(y)));
  }
  for (const x of ticks(x0, x1, 4)) {
    svg.appendChild(el("text", {x: px(x), y: H - 6, "text-anchor": "middle", class: "tick"}, fmt(x)));
  }
  svg.appendChild(el("line", {x1: L, x2: L, y1: T, y2: H - B, class: "axis"}));
  svg.appendChild(el("line", {x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis"}));
  series.forEach((s, k) => {
    let d = "";
    s.xs.forEach((x, i) => {
      const y = s.ys[i];
      if (y === null || !isFinite(y)) return;
      d += (d ? "L" : "M") + px(x).toFixed(1) + " " + py(y).toFixed(1);
    });
    if (d) svg.appendChild(el("path", {d: d, fill: "none", stroke: s.color, "stroke-width": 1.6, class: "series", "data-name": s.name}));
    svg.appendChild(el("rect", {x: W - R - 110, y: T + 4 + k * 14, width: 10, height: 3, fill: s.color}));
    svg.appendChild(el("text", {x: W - R - 96, y: T + 8 + k * 14, class: "legend"}, s.name));
  });
}
function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}
function header(table, names) {
  const tr = document.createElement("tr");
  for (const n of names) { const th = document.createElement("th"); th.textContent = n; tr.appendChild(th); }
  table.appendChild(tr);
}
function render(s) {
  const st = $("state");
  st.textContent = s.state + (s.reason ? ": " + s.reason : "");
  st.className = "badge " + s.state;
  st.setAttribute("data-state", s.state);
  $("epoch").textContent = s.epoch;
  $("leader").textContent = s.leader || "-";
  $("peers").textContent = s.members.length + " / " + s.hosts + " (quorum " + s.quorum + ")";
  $("step").textContent = s.step === null ? "-" : s.step;
  $("loss").textContent = fmt(s.loss, 4);
  $("bpb").textContent = fmt(s.val_bpb, 4);
  $("ckpt").textContent = s.checkpoint ? "step " + s.checkpoint.step + ", " + ago(s.checkpoint.age_s) : "none";
  $("self").textContent = s.self;
  const h = s.history || {step: [], loss: [], val_loss: [], val_bpb: [], tokens_per_s: []};
  const train = {xs: [], ys: []};
  h.step.forEach((x, i) => { if (x > 0) { train.xs.push(x); train.ys.push(h.loss[i]); } });
  chart($("loss-chart"), [{name: "train", color: "var(--c0)", xs: train.xs, ys: train.ys},
                          {name: "validation", color: "var(--c1)", xs: h.step, ys: h.val_loss}]);
  chart($("bpb-chart"), [{name: "val bits/byte", color: "var(--c2)", xs: h.step, ys: h.val_bpb}]);
  chart($("tps-chart"), [{name: "tokens/s", color: "var(--c3)", xs: train.xs, ys: train.xs.map((x) => h.tokens_per_s[h.step.indexOf(x)])}]);

  const shares = $("shares");
  shares.textContent = "";
  header(shares, ["peer", "compute / comm / wait", "step"]);
  for (const p of s.peers) {
    const tr = document.createElement("tr");
    cell(tr, p.peer);
    const td = cell(tr, "", "bar-cell");
    const total = p.step_ms;
    if (total > 0) {
      const bar = document.createElement("div"); bar.className = "bar";
      const wait = Math.max(0, p.wait_ms || 0), comm = Math.max(0, (p.comm_ms || 0) - wait);
      const parts = [[p.compute_ms, "var(--c0)", "compute"], [comm, "var(--c2)", "comm"], [wait, "var(--c1)", "waiting"]];
      for (const [ms, color, name] of parts) {
        const sp = document.createElement("span");
        sp.style.width = Math.max(0, 100 * (ms || 0) / total).toFixed(1) + "%";
        sp.style.background = color; sp.title = name + " " + fmt(ms) + " ms";
        bar.appendChild(sp);
      }
      td.appendChild(bar);
    } else {
      td.textContent = "-";
    }
    cell(tr, total > 0 ? fmt(total) + " ms" : "-", "num");
    shares.appendChild(tr);
  }

  const table = $("peer-table");
  table.textContent = "";
  header(table, ["peer", "state", "step", "tok/s", "slots", "steal", "load", "RSS", "mem free", "disk free", "last checkpoint", "heard", "version"]);
  for (const p of s.peers) {
    const tr = document.createElement("tr");
    tr.className = "peer" + (p.self ? " self" : "");
    tr.setAttribute("data-peer", p.peer);
    tr.setAttribute("data-state", p.state);
    cell(tr, p.peer + (p.peer === s.leader ? " (leader)" : ""));
    const stc = cell(tr, p.state + (p.reason && p.state !== "training" ? ": " + p.reason : ""), "st-" + p.state);
    stc.title = p.reason || "";
    cell(tr, p.step === null ? "-" : String(p.step), "num");
    cell(tr, fmt(p.tokens_per_s), "num");
    cell(tr, p.slots === null ? "-" : String(p.slots), "num");
    cell(tr, p.cpu_steal === null ? "-" : (100 * p.cpu_steal).toFixed(1) + "%", "num");
    cell(tr, fmt(p.load1), "num");
    cell(tr, bytes(p.rss_bytes), "num");
    cell(tr, bytes(p.mem_available_bytes), "num");
    cell(tr, bytes(p.disk_free_bytes), "num");
    cell(tr, p.checkpoint ? "step " + p.checkpoint.step + ", " + ago(p.checkpoint.age_s) : "-");
    cell(tr, p.self ? "self" : ago(p.age_s));
    cell(tr, p.version || "-");
    table.appendChild(tr);
  }

  const ev = $("events");
  ev.textContent = "";
  for (const e of s.events.slice().reverse()) {
    const li = document.createElement("li");
    li.className = "event";
    li.setAttribute("data-kind", e.kind);
    const t = document.createElement("span"); t.className = "t"; t.textContent = e.time.replace("T", " ").replace("Z", " UTC");
    const k = document.createElement("span"); k.className = "k"; k.textContent = e.kind;
    li.appendChild(t); li.appendChild(k);
    li.appendChild(document.createTextNode(e.message + " (" + e.peer + ")"));
    ev.appendChild(li);
  }
}
async function refresh() {
  try {
    const r = await fetch("/api/status", {cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
    $("error").textContent = "";
  } catch (e) {
    $("error").textContent = "cannot read /api/status: " + e.message + " (is the peer still running?)";
  }
}
refresh();
setInterval(refresh, 3000);
</script>
</body>
</html>
)HTML";
  return page;
}

}  // namespace rt::observe
