"use strict";
// Points drawn as SVG on chart.js's axes, no library: a sweep's trials, each a
// marker whose shape says its state (a dot finished, a ring running, a cross
// pruned; a circle around the best), over a numeric, log or categorical x
// axis, both axes named. Each marker is a <g data-number data-state> with a
// tooltip; `path` draws a line through points as well (the best so far).
const Scatter = (() => {
  const {svg, ticks, logTicks, tickLabels} = Chart;
  const M = {l: 66, r: 16, t: 14, b: 44};

  function text(attrs, content) {
    const node = svg("text", attrs);
    node.textContent = content;
    return node;
  }

  function cut(label, n) {
    const s = String(label);
    return s.length > n ? s.slice(0, n - 1) + "\u2026" : s;
  }

  function marker(p, sx, sy) {
    const g = svg("g", {class: `pt pt-${p.shape}`, "data-number": p.number, "data-state": p.state});
    const x = sx(p), y = sy(p.y);
    if (p.best) g.append(svg("circle", {cx: x, cy: y, r: 9, class: "pt-best"}));
    if (p.shape === "pruned") {
      const d = 5;
      g.append(svg("path", {d: `M${x - d},${y - d}L${x + d},${y + d}M${x - d},${y + d}L${x + d},${y - d}`}));
    } else {
      g.append(svg("circle", {cx: x, cy: y, r: 4.5}));
    }
    const tip = svg("title", {});
    tip.textContent = p.tip;
    g.append(tip);
    return g;
  }

  // points: [{x, y, shape: "done" | "running" | "pruned", state, number, best, tip}]
  // opts: {xLabel, yLabel, x: "linear" | "log" | "category", categories, integer,
  //        width, height, formatY, formatX, path: [{x, y}], empty}
  function draw(figure, title, points, opts) {
    const W = opts.width || 560, H = opts.height || 260;
    const kind = opts.x || "linear";
    const formatX = opts.formatX || String;
    figure.replaceChildren();
    const caption = document.createElement("figcaption");
    caption.textContent = title + (kind === "log" ? " (log scale)" : "");
    figure.append(caption);
    const fx = kind === "log" ? (v) => Math.log10(v)
      : kind === "category" ? (v, p) => opts.categories.findIndex((c) => JSON.stringify(c) === JSON.stringify(v))
        + ((p.number % 5) - 2) * 0.05  // trials at one value side by side, not on top
        : (v) => v;
    const shown = points.filter((p) => typeof p.y === "number" && Number.isFinite(p.y) &&
      (kind === "category" || (typeof p.x === "number" && (kind !== "log" || p.x > 0))));
    const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img",
      "aria-label": `${title}: ${shown.length} trial${shown.length === 1 ? "" : "s"} with a value`});
    figure.append(root);
    if (!shown.length) {
      root.append(text({x: W / 2, y: H / 2, "text-anchor": "middle", class: "axis-label"},
        opts.empty || "no objective yet"));
      return;
    }
    const xs = shown.map((p) => fx(p.x, p));
    let x0, x1;
    if (kind === "category") { x0 = -0.5; x1 = opts.categories.length - 0.5; } else {
      x0 = Math.min(...xs); x1 = Math.max(...xs);
      if (x1 === x0) { x0 -= Math.abs(x0) * 0.1 || 1; x1 += Math.abs(x1) * 0.1 || 1; }
      const pad = (x1 - x0) * 0.06; x0 -= pad; x1 += pad;
    }
    let y0 = Math.min(...shown.map((p) => p.y)), y1 = Math.max(...shown.map((p) => p.y));
    if (y1 === y0) { y0 -= Math.abs(y0) * 0.05 || 1; y1 += Math.abs(y1) * 0.05 || 1; }
    const pad = (y1 - y0) * 0.08; y0 -= pad; y1 += pad;
    const px = (v) => M.l + (v - x0) / (x1 - x0) * (W - M.l - M.r);
    const sx = (p) => px(fx(p.x, p));
    const sy = (y) => H - M.b - (y - y0) / (y1 - y0) * (H - M.t - M.b);

    const grid = svg("g", {class: "grid"});
    const yTicks = ticks(y0, y1, 4), yLabels = tickLabels(yTicks, opts.formatY);
    yTicks.forEach((v, i) => {
      grid.append(svg("line", {x1: M.l, x2: W - M.r, y1: sy(v), y2: sy(v)}));
      grid.append(text({x: M.l - 6, y: sy(v) + 4, "text-anchor": "end", class: "axis-label y-tick"}, yLabels[i]));
    });
    let xTicks;
    if (kind === "category") {
      const every = Math.ceil(opts.categories.length / Math.max(1, Math.floor((W - M.l - M.r) / 60)));
      xTicks = opts.categories.map((c, i) => [i, cut(typeof c === "number" ? formatX(c)
        : typeof c === "string" ? c : JSON.stringify(c), 10)])
        .filter(([i]) => i % every === 0);
    } else if (kind === "log") {
      xTicks = logTicks(x0, x1).map((t) => [t, formatX(Math.pow(10, t))]);
    } else {
      const at = ticks(x0, x1, Math.max(2, Math.floor((W - M.l - M.r) / 70)), opts.integer);
      const said = tickLabels(at.map((t) => opts.integer ? Math.round(t) : t), formatX);
      xTicks = at.map((t, i) => [t, said[i]]);
    }
    for (const [t, label] of xTicks) {
      grid.append(svg("line", {x1: px(t), x2: px(t), y1: M.t, y2: H - M.b, class: "vgrid"}));
      grid.append(text({x: px(t), y: H - M.b + 15, "text-anchor": "middle", class: "axis-label x-tick"}, label));
    }
    grid.append(text({x: M.l + (W - M.l - M.r) / 2, y: H - 6, "text-anchor": "middle",
      class: "axis-label axis-title"}, opts.xLabel));
    const yMid = M.t + (H - M.t - M.b) / 2;
    grid.append(text({x: 0, y: 0, "text-anchor": "middle", class: "axis-label axis-title",
      transform: `translate(13 ${yMid}) rotate(-90)`}, cut(opts.yLabel, 28)));
    root.append(grid);
    if (opts.path && opts.path.length > 1) {
      root.append(svg("polyline", {class: "best-so-far", points: opts.path
        .map((p) => `${px(fx(p.x, p)).toFixed(1)},${sy(p.y).toFixed(1)}`).join(" ")}));
    }
    for (const p of shown) root.append(marker(p, sx, sy));
  }

  // The markers' key, under a chart: [[shape, words], ...].
  function legend(figure, items) {
    const p = document.createElement("p");
    p.className = "legend";
    for (const [shape, words] of items) {
      const item = document.createElement("span");
      item.className = `pt-key pt-key-${shape}`;
      item.textContent = words;
      p.append(item);
    }
    figure.append(p);
  }

  return {draw, legend};
})();
