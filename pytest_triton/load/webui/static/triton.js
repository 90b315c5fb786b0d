// pytest-triton's charts page: draws ./triton/live.json every 2 s with plain SVG (no library,
// nothing fetched from elsewhere: the page must work on a closed network).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const COLORS = { samples: "#0969da", p99: "#cf222e", queue: "#e8910c", compute_input: "#8250df",
                 compute_infer: "#1a7f37", compute_output: "#0969da", overhead: "#8c959f",
                 histogram: "#0969da", tokens: "#1a7f37", ttft: "#cf222e", itl: "#8250df" };
const PHASES = [["queue", "queue"], ["compute_input", "compute input"],
                ["compute_infer", "compute infer"], ["compute_output", "compute output"],
                ["overhead", "overhead"]];

function el(tag, attrs, text) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4))
                                      : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function fmt(value, digits) {
  if (value === null || value === undefined || Number.isNaN(value)) return "n/a";
  return Number(value).toLocaleString("en-US", { maximumFractionDigits: digits ?? 1 });
}

function ms(value) {  // a latency with the histogram's 3 significant digits: 2.14, 0.213, 25.3
  if (value === null || value === undefined || Number.isNaN(value)) return "n/a";
  if (Math.abs(value) >= 99.95) return fmt(value, 0);
  return Number(value).toPrecision(3);
}

function axes(svg, w, h, pad, yMax, xMin, xMax, unit) {
  svg.append(el("svg:line", { class: "axis", x1: pad, y1: h - 20, x2: w - 5, y2: h - 20 }));
  svg.append(el("svg:line", { class: "axis", x1: pad, y1: 5, x2: pad, y2: h - 20 }));
  svg.append(el("svg:text", { x: pad - 4, y: 12, "text-anchor": "end" },
                         fmt(yMax, yMax < 10 ? 2 : 0)));
  svg.append(el("svg:text", { x: pad - 4, y: h - 20, "text-anchor": "end" }, "0"));
  svg.append(el("svg:text", { x: pad, y: h - 5 }, `${fmt(xMin, 0)} s`));
  svg.append(el("svg:text", { x: w - 5, y: h - 5, "text-anchor": "end" }, `${fmt(xMax, 0)} s`));
  svg.append(el("svg:text", { x: pad + 6, y: 14 }, unit));
}

function lineChart(kind, title, points, unit) {
  const w = 440, h = 170, pad = 56;
  const box = el("div", { class: "chart" });
  box.append(el("h3", {}, title));
  const svg = el("svg:svg", { width: w, height: h, "data-chart": kind,
                              "data-points": points.length });
  const ys = points.map((p) => p.y);
  const yMax = Math.max(1e-9, ...ys) * 1.1;
  const xMin = points.length ? points[0].x : 0;
  const xMax = points.length ? Math.max(points[points.length - 1].x, xMin + 1) : 1;
  axes(svg, w, h, pad, yMax, xMin, xMax, unit);
  if (points.length) {
    const x = (v) => pad + ((v - xMin) / (xMax - xMin)) * (w - pad - 10);
    const y = (v) => h - 20 - (v / yMax) * (h - 30);
    const d = points.map((p, i) => `${i ? "L" : "M"}${x(p.x).toFixed(1)},${y(p.y).toFixed(1)}`);
    svg.append(el("svg:path", { class: "line", d: d.join(" "), stroke: COLORS[kind] }));
  }
  box.append(svg);
  return box;
}

function breakdownChart(model) {
  const w = 440, h = 90, left = 10, width = w - 20;
  const box = el("div", { class: "chart" });
  box.append(el("h3", {}, "Server latency per request, stacked (us)"));
  const svg = el("svg:svg", { width: w, height: h, "data-chart": "breakdown" });
  const parts = PHASES.map(([key, label]) => [key, label, model.breakdown_us[key] || 0]);
  const total = parts.reduce((sum, p) => sum + p[2], 0);
  let x = left;
  parts.forEach(([key, label, value], i) => {
    const bar = total > 0 ? (value / total) * width : 0;
    const rect = el("svg:rect", { x: x.toFixed(1), y: 8, width: bar.toFixed(1), height: 26,
                                  fill: COLORS[key], "data-phase": key });
    rect.append(el("svg:title", {}, `${label}: ${fmt(value, 0)} us`));
    svg.append(rect);
    x += bar;
    const lx = left + (i % 3) * 145, ly = 52 + Math.floor(i / 3) * 16;
    svg.append(el("svg:rect", { x: lx, y: ly - 9, width: 10, height: 10, fill: COLORS[key] }));
    svg.append(el("svg:text", { x: lx + 14, y: ly }, `${label} ${fmt(value, 0)}`));
  });
  box.append(svg);
  return box;
}

function histogramChart(model) {
  const entries = Object.entries(model.histogram).map(([k, v]) => [Number(k), v]);
  entries.sort((a, b) => a[0] - b[0]);
  const w = 440, h = 170, pad = 56;
  const box = el("div", { class: "chart" });
  box.append(el("h3", {}, "Batch-size histogram (executions per batch size)"));
  const svg = el("svg:svg", { width: w, height: h, "data-chart": "histogram",
                              "data-bars": entries.length });
  const yMax = Math.max(1, ...entries.map((e) => e[1]));
  svg.append(el("svg:line", { class: "axis", x1: pad, y1: h - 20, x2: w - 5, y2: h - 20 }));
  svg.append(el("svg:text", { x: pad - 4, y: 12, "text-anchor": "end" }, fmt(yMax, 0)));
  const slot = (w - pad - 10) / Math.max(entries.length, 1);
  const labelEvery = Math.ceil(entries.length / 12);
  entries.forEach(([size, count], i) => {
    const bh = (count / yMax) * (h - 30);
    const rect = el("svg:rect", { x: (pad + i * slot + 1).toFixed(1), y: (h - 20 - bh).toFixed(1),
                                  width: Math.max(slot - 2, 1).toFixed(1), height: bh.toFixed(1),
                                  fill: COLORS.histogram, "data-batch": size });
    rect.append(el("svg:title", {}, `batch ${size}: ${count} executions`));
    svg.append(rect);
    if (i % labelEvery === 0) {
      svg.append(el("svg:text", { x: pad + (i + 0.5) * slot, y: h - 5, "text-anchor": "middle" },
                    String(size)));
    }
  });
  box.append(svg);
  return box;
}

function kpi(label, value) {
  const node = el("div", { class: "kpi" });
  node.append(el("div", { class: "v" }, value), el("div", { class: "l" }, label));
  return node;
}

function drawModel(model, history) {
  const card = el("div", { class: "model", "data-model": model.model });
  card.append(el("h2", {}, model.model));
  const kpis = el("div", { class: "kpis" });
  kpis.append(kpi("samples/s (now)", fmt(model.samples_s)),
              kpi("requests/s (now)", fmt(model.requests_s)),
              kpi("p50 / p95 / p99 (ms)",
                  `${ms(model.p50_ms)} / ${ms(model.p95_ms)} / ${ms(model.p99_ms)}`),
              kpi("server avg batch size", fmt(model.avg_batch_size, 2)));
  card.append(kpis);
  const series = (key) => history.filter((p) => p.models[model.model] &&
                                                p.models[model.model][key] !== null)
                                 .map((p) => ({ x: p.t, y: p.models[model.model][key] }));
  const charts = el("div", { class: "charts" });
  charts.append(lineChart("samples", "Samples/s over time", series("samples_s"), "samples/s"),
                lineChart("p99", "Client p99 latency over time (last ~10 s)", series("p99_ms"),
                          "ms"),
                breakdownChart(model), histogramChart(model));
  card.append(charts);
  return card;
}

function drawStreams(streams, history) {  // the run's streams: TTFT, ITL and tokens/s
  const card = el("div", { class: "model", "data-model": "streams" });
  card.append(el("h2", {}, `Streams: ${streams.model}`));
  const kpis = el("div", { class: "kpis" });
  kpis.append(kpi("streams ended (complete + failed)",
                  `${fmt(streams.streams + streams.failed, 0)} (${fmt(streams.streams, 0)} + ` +
                  `${fmt(streams.failed, 0)})`),
              kpi("time to first token p50 / p99 (ms)",
                  `${ms(streams.ttft_p50_ms)} / ${ms(streams.ttft_p99_ms)}`),
              kpi("inter-token latency p50 / p99 (ms)",
                  `${ms(streams.itl_p50_ms)} / ${ms(streams.itl_p99_ms)}`),
              kpi("output tokens/s (now)", fmt(streams.tokens_per_s)));
  card.append(kpis);
  const series = (key) => history.filter((p) => p.streams && p.streams[key] !== null &&
                                                p.streams[key] !== undefined)
                                 .map((p) => ({ x: p.t, y: p.streams[key] }));
  const charts = el("div", { class: "charts" });
  charts.append(lineChart("tokens", "Output tokens/s over time (last ~10 s)",
                          series("tokens_s"), "tokens/s"),
                lineChart("ttft", "Time to first token p99 over time (last ~10 s)",
                          series("ttft_p99_ms"), "ms"),
                lineChart("itl", "Inter-token latency p99 over time (last ~10 s)",
                          series("itl_p99_ms"), "ms"));
  card.append(charts);
  return card;
}

function draw(data) {
  const state = data.final ? `${data.state} (final)` : data.state;
  document.getElementById("status").textContent =
    `state: ${state} | ${fmt(data.elapsed_s, 0)} s since the test started`;
  const warnings = document.getElementById("warnings");
  warnings.replaceChildren(...data.warnings.map((w) => el("div", { class: "warning" }, w)));
  const cards = data.models.map((m) => drawModel(m, data.history));
  if (data.streams) cards.push(drawStreams(data.streams, data.history));
  document.getElementById("models").replaceChildren(...cards);
  const body = document.querySelector("#rows tbody");
  body.replaceChildren(...data.rows.map((r) => {
    const tr = el("tr");
    for (const key of ["model", "figure", "value", "target", "status"]) {
      tr.append(el("td", key === "status" && r.status ? { class: r.status } : {}, r[key]));
    }
    return tr;
  }));
}

async function refresh() {
  try {
    const response = await fetch("triton/live.json", { cache: "no-store" });
    if (response.ok) draw(await response.json());
  } catch (error) {
    document.getElementById("status").textContent = `cannot reach Locust: ${error}`;
  }
}

refresh();
setInterval(refresh, 2000);
