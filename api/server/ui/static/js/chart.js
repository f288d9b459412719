"use strict";
// Line charts drawn as SVG, no library: each series a polyline over steps,
// with vertical marks where an attempt began (a restart, a preemption, a
// resume). The polyline's data-points attribute says how many points it drew.
const Chart = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const W = 560, H = 240, M = {l: 64, r: 14, t: 12, b: 30};

  function svg(tag, attrs) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    return node;
  }

  // About n round values (1, 2 or 5 x a power of ten apart) over [lo, hi]; `integer`:
  // at least 1 apart (steps, trial numbers), so no two round to one label.
  function ticks(lo, hi, n, integer) {
    if (!(hi > lo)) return [lo];
    const step0 = integer ? Math.max(1, (hi - lo) / n) : (hi - lo) / n;
    const mag = Math.pow(10, Math.floor(Math.log10(step0)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= step0 * (1 - 1e-9)) || step0;
    const out = [];
    // each a multiple of the step (not a running sum, which drifts: 0.30000000000000004)
    for (let k = Math.ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k++) out.push(k * step);
    return out;
  }

  // The ticks' labels: `format(v)` where those tell every tick apart and each says its
  // tick's value; else `format(v, digits)` with the fewest digits that do. A flat or
  // nearly flat series has ticks close together: one decimal read 1.5, 1.4, 1.4 MiB
  // for three ticks, or 1.3 for a tick at 1.25. A format that takes no digits is used as it is.
  function tickLabels(values, format) {
    const said = (text) => parseFloat(text);
    const honest = (texts, digits) => new Set(texts).size === texts.length &&
      values.every((v, i) => said(texts[i]) === said(format(v, (digits ?? 0) + 6)) ||
        Number.isNaN(said(texts[i])));
    let texts = values.map((v) => format(v));
    if (honest(texts, 6)) return texts;
    for (let digits = 0; digits <= 8; digits++) {
      texts = values.map((v) => format(v, digits));
      if (honest(texts, digits)) return texts;
    }
    return texts;
  }

  // Ticks on a log10 axis: the powers of ten in range (with 2x and 5x over a short range).
  function logTicks(lo, hi, base) {
    const out = [];
    // bytes: powers of 1024 and 4x steps between (1 MiB, 4 MiB, 16 MiB, ...); else 1-2-5
    const mults = base === 1024 ? [1, 4, 16, 64, 256] : hi - lo < 2 ? [1, 2, 5] : [1];
    if (base === 1024) {
      for (let e = Math.floor(lo / Math.log10(1024)); e <= Math.ceil(hi / Math.log10(1024)); e++) {
        for (const m of mults) {
          const t = e * Math.log10(1024) + Math.log10(m);
          if (t >= lo && t <= hi) out.push(t);
        }
      }
      return out.length ? out : [lo];
    }
    for (let e = Math.floor(lo); e <= Math.ceil(hi); e++) {
      for (const m of mults) {
        const t = e + Math.log10(m);
        if (t >= lo && t <= hi) out.push(t);
      }
    }
    return out.length ? out : [lo];
  }

  // figure: the <figure> to draw into; lines: [{name, key, data: {step, value}, cls, dashed}];
  // format(v, digits): a value's text (digits: how many decimals, where the ticks need more);
  // opts.log: a log10 value axis (for series orders of magnitude apart); opts.base: 1024 for
  // bytes (ticks round in KiB, MiB, ...); opts.note: a
  // caption under the legend saying what the lines measure; opts.xLabel: the x axis's unit
  // (default "step")
  function draw(figure, title, lines, marks, format, opts) {
    const log = Boolean(opts && opts.log);
    const fy = log ? (v) => Math.log10(Math.max(v, 1e-12)) : (v) => v;
    figure.replaceChildren();
    const caption = document.createElement("figcaption");
    caption.textContent = title + (log ? " (log scale)" : "");
    figure.append(caption);
    const present = lines.filter((l) => l.data && l.data.step.length);
    const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "data-scale": log ? "log" : "linear",
      "aria-label": `${title}: ` + (present.map((l) => `${l.name}, ${l.data.step.length} points`).join("; ") || "no data yet")});
    figure.append(root);
    if (!present.length) {
      const t = svg("text", {x: W / 2, y: H / 2, "text-anchor": "middle", class: "axis-label"});
      t.textContent = "no data yet";
      root.append(t);
      return;
    }
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const l of present) {
      for (const s of l.data.step) { x0 = Math.min(x0, s); x1 = Math.max(x1, s); }
      for (const v of l.data.value) { y0 = Math.min(y0, fy(v)); y1 = Math.max(y1, fy(v)); }
    }
    if (x1 === x0) x1 = x0 + 1;
    const least = y0;
    if (y1 === y0) { y0 -= Math.abs(y0) * 0.05 || 1; y1 += Math.abs(y1) * 0.05 || 1; }
    const pad = (y1 - y0) * 0.05; y0 -= pad; y1 += pad;
    if (!log && least >= 0) y0 = Math.max(y0, 0);  // no negative ticks under a series that has none
    const sx = (x) => M.l + (x - x0) / (x1 - x0) * (W - M.l - M.r);
    const sy = (y) => H - M.b - (y - y0) / (y1 - y0) * (H - M.t - M.b);
    const grid = svg("g", {class: "grid"});
    // bytes (opts.base 1024) on a linear axis: round values of the unit the labels use
    const unit = !log && opts && opts.base === 1024
      ? Math.pow(1024, Math.max(0, Math.floor(Math.log(Math.max(Math.abs(y0), Math.abs(y1), 1)) / Math.log(1024))))
      : 1;
    const yTicks = log ? logTicks(y0, y1, opts.base)
      : ticks(y0 / unit, y1 / unit, 4, unit === 1 && Boolean(opts && opts.base === 1024)).map((t) => t * unit);
    const yLabels = tickLabels(yTicks.map((v) => log ? Math.pow(10, v) : v), format);
    yTicks.forEach((v, i) => {
      grid.append(svg("line", {x1: M.l, x2: W - M.r, y1: sy(v), y2: sy(v)}));
      const t = svg("text", {x: M.l - 6, y: sy(v) + 4, "text-anchor": "end", class: "axis-label y-tick"});
      t.textContent = yLabels[i];
      grid.append(t);
    });
    for (const v of ticks(x0, x1, 6, true)) {
      const t = svg("text", {x: sx(v), y: H - M.b + 16, "text-anchor": "middle", class: "axis-label x-tick"});
      t.textContent = String(Math.round(v));
      grid.append(t);
    }
    const xl = svg("text", {x: W - M.r, y: H - 2, "text-anchor": "end", class: "axis-label"});
    xl.textContent = (opts && opts.xLabel) || "step";
    grid.append(xl);
    root.append(grid);
    for (const m of marks || []) {
      if (m.step < x0 || m.step > x1) continue;
      const g = svg("g", {class: `mark mark-${m.kind}`, "data-step": m.step, "data-kind": m.kind});
      g.append(svg("line", {x1: sx(m.step), x2: sx(m.step), y1: M.t, y2: H - M.b}));
      const t = svg("text", {x: sx(m.step) + 3, y: M.t + 10, class: "mark-label"});
      t.textContent = m.kind;
      g.append(t);
      root.append(g);
    }
    for (const l of present) {
      const pts = l.data.step.map((s, i) => `${sx(s).toFixed(1)},${sy(fy(l.data.value[i])).toFixed(1)}`);
      root.append(svg("polyline", {points: pts.join(" "), class: `line ${l.cls}` + (l.dashed ? " dashed" : ""),
        "data-series": l.key, "data-points": l.data.step.length}));
    }
    const legend = document.createElement("p");
    legend.className = "legend";
    for (const l of present) {
      const item = document.createElement("span");
      item.className = `key ${l.cls}` + (l.dashed ? " dashed" : "");
      item.dataset.series = l.key;
      const last = l.data.value[l.data.value.length - 1];
      item.textContent = `${l.name}: ${format(last)} (${l.data.step.length} points)`;
      legend.append(item);
    }
    figure.append(legend);
    if (opts && opts.note) {
      const note = document.createElement("p");
      note.className = "chart-note";
      note.textContent = opts.note;
      figure.append(note);
    }
  }

  return {draw, svg, ticks, logTicks, tickLabels};
})();
