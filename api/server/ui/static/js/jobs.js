"use strict";
// The jobs page: a filtered, paged list that refreshes its states every 2 s.
// Each job's kind (training, or a dataset's preparation) and latest loss come
// with the list itself (`latest_loss` on each job: no request per job), and a
// sweep trial's objective as its sweep shows it (`trial`); the
// goodput of the page's jobs, with one more request for the page. Jobs ticked
// go to the compare view together.
document.addEventListener("DOMContentLoaded", () => {
  const {api, el, fill, badge, number, trialObjective, labelChips, time} = Brigade;
  const stateFilter = document.getElementById("state-filter");
  const nameFilter = document.getElementById("name-filter");
  const labelFilter = document.getElementById("label-filter");
  const pageSize = document.getElementById("page-size");
  const tbody = document.querySelector("#jobs-table tbody");
  const summary = document.getElementById("jobs-summary");
  const prev = document.getElementById("prev-page");
  const next = document.getElementById("next-page");
  const pageLabel = document.getElementById("page-label");

  const admin = document.getElementById("jobs-table").dataset.admin === "true";
  const columns = document.querySelectorAll("#jobs-table thead th").length;
  const query = new URLSearchParams(location.search);
  stateFilter.value = query.get("state") || "";
  if (stateFilter.value !== (query.get("state") || "")) stateFilter.value = "";
  nameFilter.value = query.get("name") || "";
  labelFilter.value = query.get("label") || "";
  if (query.get("limit")) pageSize.value = query.get("limit");
  let offset = Math.max(0, parseInt(query.get("offset") || "0", 10) || 0);
  let total = 0;

  // The jobs ticked for the compare view, kept across refreshes and pages.
  const MAX_COMPARED = 8;
  const picked = new Set();
  const compare = document.getElementById("compare");
  const compareCount = document.getElementById("compare-count");
  function pick(id, on) {
    if (on) picked.add(id); else picked.delete(id);
    compare.disabled = picked.size < 2 || picked.size > MAX_COMPARED;
    compareCount.textContent = !picked.size ? "" : picked.size > MAX_COMPARED
      ? `${picked.size} ticked: at most ${MAX_COMPARED}` : `${picked.size} ticked`;
  }
  compare.addEventListener("click", () => {
    window.location.assign("/compare?jobs=" + [...picked].map(encodeURIComponent).join(","));
  });

  function params() {
    const p = new URLSearchParams();
    if (stateFilter.value) p.set("state", stateFilter.value);
    if (nameFilter.value.trim()) p.set("name", nameFilter.value.trim());
    if (labelFilter.value.trim()) p.set("label", labelFilter.value.trim());
    p.set("limit", pageSize.value);
    p.set("offset", String(offset));
    return p;
  }

  // Goodput for the page's jobs that ever ran (a launch sets `workers`), in one request
  // (GET /v1/jobs/goodput; the server keeps a finished job's); blank for the others.
  const goodput = new Map();
  async function loadGoodput(jobs) {
    const ran = jobs.filter((j) => j.workers !== null || j.started_at).map((j) => j.id);
    if (!ran.length) return;
    const found = await api("GET", "/v1/jobs/goodput?id=" + encodeURIComponent(ran.join(",")));
    for (const g of found.items) {
      goodput.set(g.id, g.goodput === null ? "" : `${(100 * g.goodput).toFixed(1)}%`);
      const cell = tbody.querySelector(`td.goodput[data-job-id="${CSS.escape(g.id)}"]`);
      if (cell) {
        cell.textContent = goodput.get(g.id);
        cell.title = `wall ${g.wall_s.toFixed(1)} s; training ${g.phases.training.toFixed(1)} s`;
      }
    }
  }

  async function load() {
    const p = params();
    history.replaceState(null, "", "/?" + p.toString());
    let page;
    try {
      page = await api("GET", "/v1/jobs?" + p.toString());
    } catch (e) {  // a label filter that is not key=value: the server's 422 says why
      if (!(e instanceof Brigade.ApiError) || e.status !== 422) throw e;
      fill(tbody, [], e.message, columns);
      summary.textContent = "";
      return;
    }
    total = page.total;
    const rows = page.items.map((job) => {
      const kind = job.spec.kind || "train";
      const loss = kind === "prepare" || job.latest_loss === null || job.latest_loss === undefined
        ? "-" : number(job.latest_loss, 3);
      return el("tr", {"data-job-id": job.id, "data-kind": kind},
      el("td", {}, el("input", {type: "checkbox", class: "pick", value: job.id, "aria-label": `compare ${job.name}`,
        checked: picked.has(job.id), onchange: (e) => pick(job.id, e.target.checked)}), " ",
        el("a", {href: `/jobs/${encodeURIComponent(job.id)}`}, job.name),
        el("div", {class: "muted mono small id", title: job.id}, job.id),
        Object.keys(job.labels || {}).length ? el("div", {class: "label-list"}, labelChips(job.labels, "/", "jobs")) : null),
      admin ? el("td", {class: "hide-narrow"}, job.tenant) : null,
      el("td", {class: "hide-narrow"}, el("span", {class: `kind kind-${kind}`}, kind)),
      el("td", {}, badge(job.state)),
      el("td", {class: "num"}, `${job.step} / ${job.spec.train.steps}` + (kind === "prepare" ? " files" : ""),
        loss === "-" ? null : el("div", {class: "muted small show-narrow"}, `loss ${loss}`)),
      el("td", {class: "num loss hide-narrow"}, loss),
      el("td", {class: "num objective hide-narrow"}, job.trial ? trialObjective(job.trial) : ""),
      el("td", {class: "num hide-narrow"}, job.workers ?? "-"),
      el("td", {class: "num hide-narrow"}, `${job.restarts}` + (job.preemptions ? ` (+${job.preemptions} preempted)` : "")),
      el("td", {class: "num goodput hide-narrow", "data-job-id": job.id}, goodput.get(job.id) ?? ""),
      el("td", {class: "hide-narrow"}, time(job.created_at)),
      el("td", {class: "note hide-narrow"}, job.waiting || job.error || ""),
      );
    });
    fill(tbody, rows, "No jobs match.", columns);
    await loadGoodput(page.items);
    const limit = page.limit;
    const first = total ? page.offset + 1 : 0;
    const last = Math.min(total, page.offset + page.items.length);
    summary.textContent = `${total.toLocaleString("en")} job${total === 1 ? "" : "s"}` +
      (stateFilter.value || nameFilter.value || labelFilter.value ? " match" : "") + ".";
    pageLabel.textContent = `${first.toLocaleString("en")}\u2013${last.toLocaleString("en")} of ${total.toLocaleString("en")}`;
    prev.disabled = page.offset === 0;
    next.disabled = page.offset + limit >= total;
  }

  let timerStop = Brigade.every(2000, load);
  function reload() { timerStop(); timerStop = Brigade.every(2000, load); }
  stateFilter.addEventListener("change", () => { offset = 0; reload(); });
  pageSize.addEventListener("change", () => { offset = 0; reload(); });
  let typing = null;
  for (const filter of [nameFilter, labelFilter]) {
    filter.addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(() => { offset = 0; reload(); }, 250);
    });
  }
  document.getElementById("filters").addEventListener("submit", (e) => { e.preventDefault(); reload(); });
  prev.addEventListener("click", () => { offset = Math.max(0, offset - Number(pageSize.value)); reload(); });
  next.addEventListener("click", () => { offset += Number(pageSize.value); reload(); });
});
