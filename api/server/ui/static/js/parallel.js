"use strict";
// A sweep's trials in parallel coordinates, SVG on chart.js's helpers: one
// vertical axis a parameter (log for a log domain, a grid's or choice's values
// spaced evenly) and the objective's last, each trial a line through its
// values, coloured by its objective (the best dark blue, the worst light; a
// pruned trial dashed, one without an objective grey and left off the last
// axis). Each line is a <polyline data-number data-state> with a tooltip.
// And each parameter's importance (GET /v1/sweeps/{id}/importance) as bars.
const Parallel = (() => {
  const {svg, ticks, logTicks} = Chart;
  const M = {l: 24, r: 70, t: 34, b: 26};

  function text(attrs, content) {
    const node = svg("text", attrs);
    node.textContent = content;
    return node;
  }

  const cut = (s, n) => (s = String(s), s.length > n ? s.slice(0, n - 1) + "\u2026" : s);

  // An axis's scale: v -> 0..1 (bottom to top) and its ticks [[fraction, label]].
  function scale(axis, values, format) {
    const present = values.filter((v) => v !== null && v !== undefined);
    if (axis.kind === "category") {
      const cats = axis.categories;
      const at = (v) => cats.length === 1 ? 0.5 : cats.findIndex((c) => JSON.stringify(c) === JSON.stringify(v)) / (cats.length - 1);
      return {at, ticks: cats.map((c) => [at(c), typeof c === "number" ? format(c) : String(c)])};
    }
    const log = axis.kind === "log";
    const f = (v) => log ? Math.log10(v) : v;
    const fs = present.filter((v) => typeof v === "number" && (!log || v > 0)).map(f);
    let lo = axis.lo !== undefined ? f(axis.lo) : Math.min(...fs);
    let hi = axis.hi !== undefined ? f(axis.hi) : Math.max(...fs);
    if (!fs.length) { lo = 0; hi = 1; }
    if (hi === lo) { lo -= Math.abs(lo) * 0.1 || 1; hi += Math.abs(hi) * 0.1 || 1; }
    const at = (v) => (f(v) - lo) / (hi - lo);
    const raw = log ? logTicks(lo, hi) : ticks(lo, hi, 4);
    return {at, ticks: raw.map((t) => [(t - lo) / (hi - lo), format(log ? Math.pow(10, t) : t)])};
  }

  // axes: [{name, kind: "linear" | "log" | "category", categories, lo, hi}] (the objective last);
  // trials: [{number, state, values: [one an axis], tip, best}]; opts: {mode, format, width, height}
  function draw(figure, title, axes, trials, opts) {
    const W = opts.width || 1120, H = opts.height || 300;
    figure.replaceChildren();
    const caption = document.createElement("figcaption");
    caption.textContent = title;
    figure.append(caption);
    const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img",
      "aria-label": `${title}: ${trials.length} trial${trials.length === 1 ? "" : "s"} across ${axes.length} axes`});
    figure.append(root);
    if (!trials.length) {
      root.append(text({x: W / 2, y: H / 2, "text-anchor": "middle", class: "axis-label"}, "no trial yet"));
      return;
    }
    const x = (i) => M.l + (axes.length === 1 ? 0.5 : i / (axes.length - 1)) * (W - M.l - M.r);
    const y = (fraction) => H - M.b - fraction * (H - M.t - M.b);
    const scales = axes.map((a, i) => scale(a, trials.map((t) => t.values[i]), opts.format));
    const last = axes.length - 1;
    const objectives = trials.map((t) => t.values[last]).filter((v) => typeof v === "number");
    const lo = Math.min(...objectives), hi = Math.max(...objectives);
    // 0 the best, 1 the worst
    const rank = (v) => hi === lo ? 0 : opts.mode === "min" ? (v - lo) / (hi - lo) : (hi - v) / (hi - lo);

    const lines = svg("g", {class: "pc-lines"});
    // the worst first, so the best lie on top
    const order = [...trials].sort((a, b) => (typeof b.values[last] === "number" ? rank(b.values[last]) : 2)
      - (typeof a.values[last] === "number" ? rank(a.values[last]) : 2));
    for (const t of order) {
      const points = [];
      t.values.forEach((v, i) => {
        if (v === null || v === undefined || (axes[i].kind === "log" && !(v > 0))) return;
        points.push(`${x(i).toFixed(1)},${y(scales[i].at(v)).toFixed(1)}`);
      });
      const objective = t.values[last];
      const line = svg("polyline", {points: points.join(" "), "data-number": t.number, "data-state": t.state,
        class: `pc-line${t.state === "PRUNED" ? " pc-pruned" : ""}${typeof objective !== "number" ? " pc-none" : ""}${t.best ? " pc-best" : ""}`});
      if (typeof objective === "number") {
        // dark blue (the best) to a pale one (the worst): one hue, so no colour means two things
        const r = rank(objective);
        line.setAttribute("stroke", `hsl(205, ${Math.round(100 - 45 * r)}%, ${Math.round(28 + 50 * r)}%)`);
      }
      const tip = svg("title", {});
      tip.textContent = t.tip;
      line.append(tip);
      lines.append(line);
    }
    root.append(lines);

    const frame = svg("g", {class: "pc-axes"});
    axes.forEach((a, i) => {
      frame.append(svg("line", {x1: x(i), x2: x(i), y1: y(0), y2: y(1), class: "pc-axis"}));
      frame.append(text({x: x(i), y: 14, "text-anchor": i === 0 ? "start" : i === last ? "end" : "middle",
        class: "axis-label axis-title"}, cut(a.name + (a.kind === "log" ? " (log)" : ""), 26)));
      for (const [fraction, label] of scales[i].ticks) {
        if (fraction < -1e-9 || fraction > 1 + 1e-9) continue;
        frame.append(svg("line", {x1: x(i) - 3, x2: x(i) + 3, y1: y(fraction), y2: y(fraction), class: "pc-tick"}));
        frame.append(text({x: x(i) + 5, y: y(fraction) + 4, class: "axis-label pc-label"}, cut(label, 9)));
      }
    });
    root.append(frame);
  }

  // importance: {evaluator, trials, importances: {param: share}, reason}
  function importance(figure, found) {
    figure.replaceChildren();
    const caption = document.createElement("figcaption");
    caption.textContent = `Each parameter's importance (Optuna's ${found.evaluator.replace("_", "-").toUpperCase()}` +
      `, ${found.trials} finished trial${found.trials === 1 ? "" : "s"})`;
    figure.append(caption);
    const entries = Object.entries(found.importances);
    if (!entries.length) {
      const p = document.createElement("p");
      p.className = "muted small";
      p.textContent = found.reason || "No importance yet.";
      figure.append(p);
      return;
    }
    const W = 560, row = 24, L = 170, R = 56, H = entries.length * row + 8;
    const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "importance of each parameter"});
    entries.forEach(([name, share], i) => {
      const g = svg("g", {class: "imp-row", "data-param": name, "data-share": share.toFixed(4)});
      const yy = 4 + i * row;
      g.append(text({x: L - 8, y: yy + 15, "text-anchor": "end", class: "axis-label imp-name"}, cut(name, 24)));
      g.append(svg("rect", {x: L, y: yy + 3, height: row - 8, width: Math.max(1, share * (W - L - R)), class: "imp-bar"}));
      g.append(text({x: L + share * (W - L - R) + 6, y: yy + 15, class: "axis-label"}, `${(share * 100).toFixed(1)}%`));
      const tip = svg("title", {});
      tip.textContent = `${name}: ${(share * 100).toFixed(1)}% of the objective's variation the evaluator puts down to it`;
      g.append(tip);
      root.append(g);
    });
    figure.append(root);
  }

  return {draw, importance};
})();
