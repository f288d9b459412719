"use strict";
// A sweep's page, from GET /v1/sweeps/{id} every 2 s until the sweep ends:
// the objective of each trial (pruned ones crossed), each parameter against
// the objective, the trials across every parameter at once (parallel
// coordinates) with each parameter's importance (Optuna's evaluator, GET
// .../importance, asked again when a trial has finished), the best trials'
// curves overlaid (their jobs' series), and the trials' table, sorted by any column whose header is clicked. Trials
// ticked (or the best ones) open in the compare view.
document.addEventListener("DOMContentLoaded", () => {
  const {api, el, fill, badge, number, show} = Brigade;
  const root = document.getElementById("sweep");
  const base = `/v1/sweeps/${encodeURIComponent(root.dataset.sweepId)}`;
  const MAX_COMPARED = Number(root.dataset.maxCompared);
  const BEST_CURVES = 5;
  const ENDED = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
  const SHAPES = {SUCCEEDED: "done", PRUNED: "pruned", RUNNING: "running", QUEUED: "running"};
  const SHAPE_WORDS = {done: "succeeded", running: "running", pruned: "pruned (at its pruning step)",
    stopped: "failed or cancelled"};
  const table = document.getElementById("trials");
  const result = document.getElementById("action-result");
  const picked = new Set();
  const curves = new Map();  // a job's series, kept once its trial has ended
  let sweep = null;
  let sort = {key: "number", param: null, dir: 1};

  const isNumber = (v) => typeof v === "number" && Number.isFinite(v);
  const minimise = () => sweep.objective.mode === "min";
  const byObjective = (a, b) => minimise() ? a.objective - b.objective : b.objective - a.objective;
  const formatValue = (v) => isNumber(v) ? (v !== 0 && (Math.abs(v) < 1e-3 || Math.abs(v) >= 1e5)
    ? v.toExponential(1).replace("e-", "e\u2212") : String(Number(v.toPrecision(4)))) : String(v);
  const paramsText = (t) => Object.entries(t.params).map(([k, v]) => `${k}=${formatValue(v)}`).join(", ");

  // The trials whose curves are drawn: the best finished or running ones.
  function best(trials) {
    return trials.filter((t) => t.job && isNumber(t.objective) && ["SUCCEEDED", "RUNNING"].includes(t.state))
      .sort(byObjective).slice(0, BEST_CURVES);
  }

  // The objective's name: its metric, and how it is smoothed.
  const objectiveName = () => sweep.objective.metric + (sweep.objective.smoothing === "ema" ? " (ema)" : "");

  function point(t, x) {
    const stop = t.pruned_step !== null ? `, pruned at step ${t.pruned_step}` : "";
    const last = isNumber(t.last_loss) && t.last_loss !== t.objective
      ? `; last loss ${number(t.last_loss, 4)} at step ${t.step}` : "";
    return {x, y: t.objective, number: t.number, state: t.state, shape: SHAPES[t.state] || "stopped",
      best: sweep.best !== null && sweep.best.number === t.number,
      tip: `trial ${t.number} (${t.state}${stop}): objective ${objectiveName()} ` +
        `${number(t.objective, 4)}${last}\n` + paramsText(t)};
  }

  function keyOf(points, path) {
    const shapes = [...new Set(points.filter((p) => isNumber(p.y)).map((p) => p.shape))];
    const items = ["done", "running", "pruned", "stopped"].filter((s) => shapes.includes(s))
      .map((s) => [s, SHAPE_WORDS[s]]);
    if (sweep.best) items.push(["best", "the best"]);
    if (path) items.push(["path", `the best so far`]);
    return items;
  }

  function drawObjective() {
    const figure = document.getElementById("chart-objective");
    const metric = sweep.objective.metric;
    const points = sweep.trials.map((t) => point(t, t.number));
    // the best so far over the finished trials, in their order
    const path = [];
    let so = null;
    for (const t of [...sweep.trials].sort((a, b) => a.number - b.number)) {
      if (t.state !== "SUCCEEDED" || !isNumber(t.objective)) continue;
      if (so === null || (minimise() ? t.objective < so : t.objective > so)) so = t.objective;
      path.push({x: t.number, y: so});
    }
    Scatter.draw(figure, `${objectiveName()} of each trial (${sweep.objective.mode}imised)`, points,
      {xLabel: "trial", yLabel: metric, integer: true, formatY: (v, d) => number(v, d ?? 3), path});
    Scatter.legend(figure, keyOf(points, path.length > 1));
  }

  // A parameter's axis from its domain: log for loguniform (and a numeric grid
  // over two orders of magnitude), else a grid's or choice's values side by
  // side (numbers in order), a range as a line.
  function axis(domain) {
    const values = domain.grid || domain.choice;
    if (domain.loguniform) return {x: "log"};
    if (!values) return {x: "linear", integer: Boolean(domain.int)};
    if (!values.every(isNumber)) return {x: "category", categories: values};
    const lo = Math.min(...values), hi = Math.max(...values);
    if (lo > 0 && hi / lo >= 100) return {x: "log"};
    return {x: "category", categories: [...values].sort((a, b) => a - b)};
  }

  // Each plot is drawn at the width it is shown at (one unit of its drawing a CSS pixel), so
  // its text is the stylesheet's size whatever the columns: scaled down from a fixed width,
  // three columns at 1280 px made it 8 px. Drawn again when the window's width changes.
  function shownWidth(figure) {
    const style = getComputedStyle(figure);
    const inner = figure.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    return Math.max(260, Math.round(inner || 400));
  }

  function drawParams() {
    for (const figure of document.querySelectorAll("#params figure[data-param]")) {
      const name = figure.dataset.param;
      const points = sweep.trials.map((t) => point(t, t.params[name]));
      Scatter.draw(figure, `${sweep.objective.metric} against ${name}`, points, {
        ...axis(sweep.spec.space[name] || {}), xLabel: name, yLabel: sweep.objective.metric,
        width: shownWidth(figure), height: 260, formatY: (v, d) => number(v, d ?? 3), formatX: formatValue});
      Scatter.legend(figure, keyOf(points, false));
    }
  }
  let drawnAt = window.innerWidth;
  window.addEventListener("resize", () => {
    if (sweep && window.innerWidth !== drawnAt) { drawnAt = window.innerWidth; drawParams(); }
  });

  // A parameter's axis in the parallel coordinates, from its domain (as `axis` above).
  function pcAxis(name, domain) {
    const range = domain.loguniform || domain.uniform || domain.int;
    if (range) return {name, kind: domain.loguniform ? "log" : "linear", lo: range[0], hi: range[1]};
    const values = domain.grid || domain.choice || [];
    if (values.length && values.every(isNumber)) {
      const lo = Math.min(...values), hi = Math.max(...values);
      if (lo > 0 && hi / lo >= 100) return {name, kind: "log", lo, hi};
      return {name, kind: "category", categories: [...values].sort((a, b) => a - b)};
    }
    return {name, kind: "category", categories: values};
  }

  function drawParallel() {
    const params = Object.keys(sweep.spec.space);
    const axes = [...params.map((p) => pcAxis(p, sweep.spec.space[p])),
      {name: `${sweep.objective.metric} (${sweep.objective.mode})`, kind: "linear"}];
    const trials = sweep.trials.map((t) => {
      const p = point(t, null);
      return {number: t.number, state: t.state, best: p.best, tip: p.tip,
        values: [...params.map((name) => t.params[name]), isNumber(t.objective) ? t.objective : null]};
    });
    Parallel.draw(document.getElementById("chart-parallel"),
      `Each trial across its parameters and ${sweep.objective.metric} (darker: better; dashed: pruned)`,
      axes, trials, {mode: sweep.objective.mode, format: formatValue});
  }

  let importanceOf = null;  // the finished trials the importance shown was read from
  async function drawImportance() {
    const finished = sweep.trials.filter((t) => t.state === "SUCCEEDED").map((t) => t.number).join(",");
    if (finished === importanceOf) return;
    const found = await api("GET", `${base}/importance`);
    importanceOf = finished;
    Parallel.importance(document.getElementById("chart-importance"), found);
  }

  async function drawBest(top) {
    const figure = document.getElementById("chart-best");
    const found = await Promise.all(top.map(async (t) => {
      if (!curves.has(t.job)) {
        const s = (await api("GET", `/v1/jobs/${encodeURIComponent(t.job)}/series?points=1000`)).series;
        if (t.state !== "RUNNING") curves.set(t.job, s);
        return s;
      }
      return curves.get(t.job);
    }));
    const metric = found.some((s) => s[sweep.objective.metric]) ? sweep.objective.metric : "loss";
    const lines = top.map((t, i) => ({key: t.job, name: `trial ${t.number}`, cls: `s${i}`, dashed: i >= 4,
      data: found[i][metric]}));
    const title = top.length === 1 ? `${metric} of the best trial` : top.length
      ? `${metric} of the best ${top.length} trials` : `${metric} of the best trials`;
    Chart.draw(figure, title, lines, [], (v, d) => number(v, d ?? 3), top.length ? {} : {note: "No trial has an objective yet."});
  }

  function sortValue(t) {
    if (sort.key === "objective") return t.objective;
    if (sort.key === "step") return t.step;
    if (sort.key === "param") return t.params[sort.param];
    return t.number;
  }

  // Sorted on the column clicked; a trial without a value goes last either way.
  function sorted(trials) {
    return [...trials].sort((a, b) => {
      const x = sortValue(a), y = sortValue(b);
      if (x === null || x === undefined) return y === null || y === undefined ? a.number - b.number : 1;
      if (y === null || y === undefined) return -1;
      const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return (c || a.number - b.number) * (c ? sort.dir : 1);
    });
  }

  function drawTable(top) {
    const params = Object.keys(sweep.spec.space);
    const rank = new Map(top.map((t, i) => [t.number, i]));
    const rows = sorted(sweep.trials).map((t) => el("tr",
      {"data-number": t.number, "data-state": t.state, "data-objective": t.objective ?? "",
        class: t.state === "PRUNED" ? "pruned" : null},
      el("td", {}, t.job ? el("input", {type: "checkbox", class: "pick", value: t.job,
        "aria-label": `compare ${t.name}`, checked: picked.has(t.job),
        onchange: (e) => pick(t.job, e.target.checked)}) : null),
      el("td", {class: "num"}, rank.has(t.number) ? el("span", {class: `swatch s${rank.get(t.number)}`,
        title: "its curve is drawn above"}) : null, " ", t.number),
      el("td", {class: "name"}, t.job ? el("a", {href: `/jobs/${encodeURIComponent(t.job)}`}, t.name) : t.name),
      el("td", {}, badge(t.state)),
      el("td", {class: "num objective"}, number(t.objective, 4)),
      el("td", {class: "num hide-narrow"}, t.step ?? "-"),
      el("td", {class: "hide-narrow pruned-at"}, t.pruned_step !== null ? `at step ${t.pruned_step}` : ""),
      el("td", {class: "num hide-narrow last-loss"}, number(t.last_loss, 4)),
      params.map((p) => el("td", {class: "num param"}, p in t.params ? formatValue(t.params[p]) : "-")),
      el("td", {class: "note hide-narrow"}, t.error || "")));
    fill(table.querySelector("tbody"), rows, "No trials yet.", 9 + params.length);
    for (const th of table.querySelectorAll("th[data-sort]")) {
      const on = th.dataset.sort === sort.key && (sort.key !== "param" || th.dataset.param === sort.param);
      if (on) th.setAttribute("aria-sort", sort.dir > 0 ? "ascending" : "descending");
      else th.removeAttribute("aria-sort");
    }
  }

  function pick(job, on) {
    if (on) picked.add(job); else picked.delete(job);
    const button = document.getElementById("compare-picked");
    button.disabled = picked.size < 2 || picked.size > MAX_COMPARED;
    button.textContent = picked.size ? `Compare ticked (${picked.size})` : "Compare ticked";
  }

  const compareHref = (jobs) => "/compare?jobs=" + jobs.map(encodeURIComponent).join(",");

  function drawHead(top) {
    document.getElementById("sweep-state").replaceChildren(badge(sweep.state));
    const c = sweep.counts;
    const s = sweep.spec;
    document.getElementById("sweep-facts").textContent = [
      `${sweep.objective.mode}imise ${sweep.objective.metric}`,
      `${s.sampler} sampler (seed ${s.seed})`,
      s.pruner === "none" ? "no pruning" : `${s.pruner} pruning`,
      `${c.total} of ${s.max_trials} trials, ${s.max_concurrent} at once`,
      ["SUCCEEDED", "RUNNING", "QUEUED", "PRUNED", "FAILED", "CANCELLED"].filter((k) => c[k])
        .map((k) => `${c[k]} ${k.toLowerCase()}`).join(", "),
      sweep.waiting ? `waiting: ${sweep.waiting}` : "",
    ].filter(Boolean).join(" \u00b7 ");
    const b = sweep.best;
    document.getElementById("sweep-best").replaceChildren(...(b ? [
      "Best: ", b.job ? el("a", {href: `/jobs/${encodeURIComponent(b.job)}`}, `trial ${b.number}`) : `trial ${b.number}`,
      `, ${sweep.objective.metric} ${number(b.objective, 4)}, with ${paramsText(b)}`] : ["No best trial yet."]));
    show(document.getElementById("sweep-error"), sweep.error ? `error: ${sweep.error}` : "");
    document.getElementById("cancel-sweep").disabled = ENDED.has(sweep.state);
    const link = document.getElementById("compare-best");
    link.hidden = top.length < 2;
    link.href = compareHref(top.map((t) => t.job));
    link.textContent = `Compare the best ${top.length}`;
  }

  // its labels and note, and their edit form (static/js/labels.js)
  const labels = Labels.editor("sweep", base);

  let stop = null;
  async function refresh() {
    sweep = await api("GET", base);
    const top = best(sweep.trials);
    labels.draw(sweep);
    drawHead(top);
    drawTable(top);
    drawObjective();
    drawParams();
    drawParallel();
    await Promise.all([drawImportance(), drawBest(top)]);
    if (ENDED.has(sweep.state) && stop) stop();
  }
  stop = Brigade.every(2000, refresh);

  for (const th of table.querySelectorAll("th[data-sort]")) {
    th.querySelector("button").addEventListener("click", () => {
      const same = th.dataset.sort === sort.key && (sort.key !== "param" || th.dataset.param === sort.param);
      // the objective's first click puts the best first
      const first = th.dataset.sort === "objective" && sweep && !minimise() ? -1 : 1;
      sort = {key: th.dataset.sort, param: th.dataset.param || null, dir: same ? -sort.dir : first};
      if (sweep) drawTable(best(sweep.trials));
    });
  }
  document.getElementById("compare-picked").addEventListener("click", () => {
    window.location.assign(compareHref([...picked]));
  });
  document.getElementById("cancel-sweep").addEventListener("click", async () => {
    show(result, "");
    try {
      await api("POST", `${base}/cancel`);
      result.textContent = "cancel: requested";
      if (ENDED.has(sweep.state)) stop = Brigade.every(2000, refresh);
    } catch (e) {
      result.textContent = `cancel refused: ${e.message}`;
    }
    result.hidden = false;
  });
});
