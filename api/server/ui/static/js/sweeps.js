"use strict";
// The sweeps page: the tenant's sweeps (the admin's: everyone's), newest
// first, from GET /v1/sweeps, refreshed every 3 s: each one's labels (chips that
// filter the list on them, as its label filter does: `?label=key=value`) and its
// note's first line, state, trials by state, the best objective found and the
// trial that found it.
document.addEventListener("DOMContentLoaded", () => {
  const {api, el, fill, badge, number, labelChips, shortNote, time} = Brigade;
  const table = document.getElementById("sweeps-table");
  const tbody = table.querySelector("tbody");
  const admin = table.dataset.admin === "true";
  const columns = table.querySelectorAll("thead th").length;
  const stateFilter = document.getElementById("state-filter");
  const labelFilter = document.getElementById("label-filter");
  const summary = document.getElementById("sweeps-summary");
  const query = new URLSearchParams(location.search);
  stateFilter.value = query.get("state") || "";
  labelFilter.value = query.get("label") || "";

  function ofWhich(c) {
    const parts = [["RUNNING", "running"], ["QUEUED", "queued"], ["SUCCEEDED", "succeeded"],
      ["PRUNED", "pruned"], ["FAILED", "failed"], ["CANCELLED", "cancelled"]]
      .filter(([k]) => c[k]).map(([k, w]) => `${c[k]} ${w}`);
    return parts.join(" \u00b7 ") || "none yet";
  }

  async function load() {
    const shown = new URLSearchParams();  // what the page's own URL keeps
    if (stateFilter.value) shown.set("state", stateFilter.value);
    if (labelFilter.value.trim()) shown.set("label", labelFilter.value.trim());
    const qs = shown.toString();
    history.replaceState(null, "", "/sweeps" + (qs ? `?${qs}` : ""));
    let page;
    try {
      page = await api("GET", `/v1/sweeps?limit=200${qs ? `&${qs}` : ""}`);
    } catch (e) {  // a label filter that is not key=value: the server's 422 says why
      if (!(e instanceof Brigade.ApiError) || e.status !== 422) throw e;
      fill(tbody, [], e.message, columns);
      summary.textContent = "";
      return;
    }
    const rows = page.sweeps.map((s) => {
      const href = `/sweeps/${encodeURIComponent(s.id)}`;
      const ended = s.counts.total - s.counts.QUEUED - s.counts.RUNNING;
      const best = s.best ? el("a", {href: s.best.job ? `/jobs/${encodeURIComponent(s.best.job)}` : href,
        title: `trial ${s.best.number}: ` + Object.entries(s.best.params).map(([k, v]) => `${k}=${v}`).join(", ")},
      number(s.best.objective, 4)) : "-";
      return el("tr", {"data-sweep-id": s.id, "data-state": s.state},
        el("td", {class: "name"}, el("a", {href}, s.name), el("div", {class: "muted mono small id", title: s.id}, s.id),
          Object.keys(s.labels || {}).length ? el("div", {class: "label-list"}, labelChips(s.labels, "/sweeps", "sweeps")) : null,
          s.note ? el("div", {class: "run-note muted small", title: s.note}, shortNote(s.note, 60)) : null),
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
    const filtered = stateFilter.value || labelFilter.value.trim();
    fill(tbody, rows, filtered ? "No sweeps match." : "No sweeps yet.", columns);
    const n = page.sweeps.length;
    summary.textContent = `${n} sweep${n === 1 ? "" : "s"}` + (filtered ? " match" : "")
      + (n === page.limit ? ` (the newest ${n})` : "") + ".";
  }

  let stop = Brigade.every(3000, load);
  function reload() { stop(); stop = Brigade.every(3000, load); }
  stateFilter.addEventListener("change", reload);
  let typing = null;
  labelFilter.addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(reload, 250); });
  document.getElementById("filters").addEventListener("submit", (e) => { e.preventDefault(); reload(); });
});
