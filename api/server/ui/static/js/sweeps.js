"use strict";
// The sweeps page: the tenant's sweeps (the admin's: everyone's), newest
// first, from GET /v1/sweeps, refreshed every 3 s: state, trials by state,
// the best objective found and the trial that found it.
document.addEventListener("DOMContentLoaded", () => {
  const {api, el, fill, badge, number, time} = Brigade;
  const table = document.getElementById("sweeps-table");
  const tbody = table.querySelector("tbody");
  const admin = table.dataset.admin === "true";
  const columns = table.querySelectorAll("thead th").length;
  const stateFilter = document.getElementById("state-filter");
  const summary = document.getElementById("sweeps-summary");
  stateFilter.value = new URLSearchParams(location.search).get("state") || "";

  function ofWhich(c) {
    const parts = [["RUNNING", "running"], ["QUEUED", "queued"], ["SUCCEEDED", "succeeded"],
      ["PRUNED", "pruned"], ["FAILED", "failed"], ["CANCELLED", "cancelled"]]
      .filter(([k]) => c[k]).map(([k, w]) => `${c[k]} ${w}`);
    return parts.join(" \u00b7 ") || "none yet";
  }

  async function load() {
    const p = new URLSearchParams({limit: "200"});
    if (stateFilter.value) p.set("state", stateFilter.value);
    history.replaceState(null, "", "/sweeps" + (stateFilter.value ? `?state=${stateFilter.value}` : ""));
    const page = await api("GET", "/v1/sweeps?" + p.toString());
    const rows = page.sweeps.map((s) => {
      const href = `/sweeps/${encodeURIComponent(s.id)}`;
      const ended = s.counts.total - s.counts.QUEUED - s.counts.RUNNING;
      const best = s.best ? el("a", {href: s.best.job ? `/jobs/${encodeURIComponent(s.best.job)}` : href,
        title: `trial ${s.best.number}: ` + Object.entries(s.best.params).map(([k, v]) => `${k}=${v}`).join(", ")},
      number(s.best.objective, 4)) : "-";
      return el("tr", {"data-sweep-id": s.id, "data-state": s.state},
        el("td", {class: "name"}, el("a", {href}, s.name), el("div", {class: "muted mono small id", title: s.id}, s.id)),
        admin ? el("td", {class: "hide-narrow"}, s.tenant) : null,
        el("td", {}, badge(s.state)),
        el("td", {class: "num trials"}, `${ended} / ${s.spec.max_trials}`),
        el("td", {class: "hide-narrow counts"}, ofWhich(s.counts)),
        el("td", {class: "mono small"}, `${s.objective.mode} ${s.objective.metric}`),
        el("td", {class: "num best"}, best),
        el("td", {class: "hide-narrow small"}, `${s.spec.sampler}` + (s.spec.pruner !== "none" ? `, ${s.spec.pruner} pruning` : "")),
        el("td", {class: "hide-narrow"}, time(s.created_at)),
        el("td", {class: "note hide-narrow"}, s.error || s.waiting || ""));
    });
    fill(tbody, rows, stateFilter.value ? "No sweeps in that state." : "No sweeps yet.", columns);
    const n = page.sweeps.length;
    summary.textContent = `${n} sweep${n === 1 ? "" : "s"}` + (n === page.limit ? ` (the newest ${n})` : "") + ".";
  }

  let stop = Brigade.every(3000, load);
  stateFilter.addEventListener("change", () => { stop(); stop = Brigade.every(3000, load); });
  document.getElementById("filters").addEventListener("submit", (e) => e.preventDefault());
});
