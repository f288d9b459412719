"use strict";
// Goodput drawn as SVG (service/observability/goodput.py says what each phase
// is): a job's wall time as one stacked bar with a legend of seconds and
// shares, and the goodput of the caller's jobs over time as stacked columns
// of worker-seconds by phase, each with its goodput above it. Colours come
// from the stylesheet (.ph-<phase>), each always named in a legend beside it.
const Goodput = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const {el, number} = Brigade;
  // Useful work first, then what it waited on, then what was wasted or paused.
  const PHASES = ["training", "data_wait", "eval", "checkpoint_stall", "starting", "queued",
    "recovering", "lost", "suspended"];
  const NAMES = {training: "training", data_wait: "data wait", eval: "eval",
    checkpoint_stall: "checkpoint stall", starting: "starting", queued: "queued",
    recovering: "recovering", lost: "lost (redone)", suspended: "suspended"};

  function svg(tag, attrs) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    return node;
  }

  function seconds(s) {
    if (s >= 3600) return `${(s / 3600).toFixed(1)} h`;
    if (s >= 120) return `${(s / 60).toFixed(1)} min`;
    return `${s.toFixed(s >= 10 ? 0 : s >= 1 ? 1 : 2)} s`;
  }

  function percent(v, digits) { return v === null || v === undefined ? "-" : `${(100 * v).toFixed(digits ?? 0)}%`; }

  // figure: the bar's container; g: GET /v1/jobs/{id}/goodput's answer.
  function bar(figure, g) {
    const wall = g.wall_s || 0;
    const present = PHASES.filter((p) => (g.phases[p] || 0) > 0);
    const W = 1000, H = 28;
    const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img",
      class: "phasebar", "aria-label": "Where the job's time went: " +
        (present.map((p) => `${NAMES[p]} ${seconds(g.phases[p])}`).join(", ") || "nothing yet")});
    let x = 0;
    for (const p of present) {
      const w = wall > 0 ? g.phases[p] / wall * W : 0;
      const rect = svg("rect", {x: x.toFixed(2), y: 0, width: Math.max(0, w).toFixed(2), height: H,
        class: `ph-${p}`, "data-phase": p, "data-seconds": g.phases[p]});
      const tip = svg("title");
      tip.textContent = `${NAMES[p]}: ${seconds(g.phases[p])} (${percent(g.phases[p] / wall, 1)})`;
      rect.append(tip);
      root.append(rect);
      x += w;
    }
    const legend = el("p", {class: "legend phase-legend"}, present.map((p) => el("span",
      {class: `phase-key ph-${p}`, "data-phase": p, "data-seconds": g.phases[p]},
      `${NAMES[p]} ${seconds(g.phases[p])} (${percent(wall > 0 ? g.phases[p] / wall : 0, 1)})`)));
    figure.replaceChildren(root, legend);
  }

  // figure: the chart's container; report: GET /v1/usage/goodput's answer.
  function history(figure, report) {
    const W = 560, H = 220, M = {l: 56, r: 10, t: 22, b: 30};
    const buckets = report.buckets;
    const total = (b) => PHASES.reduce((a, p) => a + (b.phases[p] || 0), 0);
    const top = Math.max(0, ...buckets.map(total));
    const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img",
      "aria-label": `Goodput over the last ${seconds(report.window_s)}: ` + buckets.map((b) =>
        `${new Date(b.start).toLocaleTimeString()} ${percent(b.goodput)}`).join(", ")});
    const caption = el("figcaption", {}, "Goodput over time, by phase (worker-seconds each stretch)");
    const slot = (W - M.l - M.r) / buckets.length;
    const sy = (v) => H - M.b - (top > 0 ? v / top : 0) * (H - M.t - M.b);
    const grid = svg("g", {class: "grid"});
    for (const f of [0, 0.5, 1]) {
      grid.append(svg("line", {x1: M.l, x2: W - M.r, y1: sy(top * f), y2: sy(top * f)}));
      const t = svg("text", {x: M.l - 6, y: sy(top * f) + 4, "text-anchor": "end", class: "axis-label"});
      t.textContent = top > 0 ? `${number(top * f, 0)} w\u00b7s` : "0";
      grid.append(t);
    }
    const when = (iso) => new Date(iso).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"});
    const every = Math.max(1, Math.ceil(buckets.length / 6));
    buckets.forEach((b, i) => {
      if (i % every === 0) {
        const t = svg("text", {x: M.l + i * slot, y: H - M.b + 16, "text-anchor": "start", class: "axis-label"});
        t.textContent = when(b.start);
        grid.append(t);
      }
    });
    const end = svg("text", {x: W - M.r, y: H - 2, "text-anchor": "end", class: "axis-label"});
    end.textContent = `now (${when(report.until)})`;
    grid.append(end);
    root.append(grid);
    buckets.forEach((b, i) => {
      const g = svg("g", {class: "bucket", "data-start": b.start, "data-goodput": b.goodput ?? ""});
      const x = M.l + i * slot + slot * 0.12, w = slot * 0.76;
      let y = H - M.b;
      for (const p of PHASES) {
        const v = b.phases[p] || 0;
        if (v <= 0) continue;
        const h = (H - M.b) - sy(v);
        y -= h;
        const rect = svg("rect", {x: x.toFixed(1), y: y.toFixed(1), width: w.toFixed(1), height: h.toFixed(1),
          class: `ph-${p}`, "data-phase": p});
        const tip = svg("title");
        tip.textContent = `${when(b.start)}\u2013${when(b.end)}: ${NAMES[p]} ${number(v, 1)} worker-s`;
        rect.append(tip);
        g.append(rect);
      }
      if (b.goodput !== null && b.goodput !== undefined) {
        const t = svg("text", {x: (x + w / 2).toFixed(1), y: Math.max(M.t - 4, y - 4).toFixed(1),
          "text-anchor": "middle", class: "axis-label bucket-goodput"});
        t.textContent = percent(b.goodput);
        g.append(t);
      }
      root.append(g);
    });
    const used = PHASES.filter((p) => buckets.some((b) => (b.phases[p] || 0) > 0));
    const legend = el("p", {class: "legend phase-legend"}, used.map((p) => el("span",
      {class: `phase-key ph-${p}`, "data-phase": p}, NAMES[p])));
    const held = buckets.reduce((a, b) => a + total(b), 0);
    const useful = held - buckets.reduce((a, b) => a + (b.phases.suspended || 0), 0);
    const overall = useful > 0 ? buckets.reduce((a, b) => a + (b.phases.training || 0), 0) / useful : null;
    const note = el("p", {class: "chart-note"}, top > 0
      ? `Goodput over the window: ${percent(overall, 1)} (training over the worker-seconds held, suspensions left out).`
      : "No job held workers in this window.");
    figure.replaceChildren(caption, root, legend, note);
  }

  return {bar, history, percent, seconds, PHASES, NAMES};
})();
