"use strict";
// The cluster: capacity against usage, the caller's queue with why each job
// waits and when it is expected to start, and each tenant's fair share, quota use and data prefix; refreshed every 3 s.
// The goodput of the caller's jobs over time (a window it picks), every 15 s.
document.addEventListener("DOMContentLoaded", () => {
  const {api, el, fill, number, percent} = Brigade;

  function meter(label, used, total) {
    const share = total > 0 ? Math.min(1, used / total) : 0;
    return el("div", {class: "meter"},
      el("span", {class: "meter-label"}, `${label}: ${number(used, 1)} of ${number(total, 1)} in use`),
      el("progress", {max: 1000, value: Math.round(share * 1000), "aria-label": `${label} in use`}),
    );
  }

  function limit(used, max) { return `${number(used, 0)} / ${max === null || max === undefined ? "\u221e" : max}`; }

  // When the scheduler's rules, run forward over the running jobs' steps, start it; or why unknown.
  function expectedStart(q) {
    if (!q.expected_start) {
      return el("td", {class: "reason expected-start"}, q.expected_start_reason || "not yet forecast");
    }
    const when = new Date(q.expected_start);
    const wait = Math.max(0, Math.round((when - Date.now()) / 1000));
    return el("td", {class: "expected-start", title: when.toISOString()},
      `${when.toLocaleTimeString()} (in ${wait} s)`);
  }

  async function load() {
    const [cluster, shares] = await Promise.all([api("GET", "/v1/cluster"), api("GET", "/v1/cluster/tenants")]);
    const cap = document.getElementById("capacity");
    cap.replaceChildren(meter("CPUs", cluster.usage.cpu || 0, cluster.capacity.cpu || 0),
      meter("GPUs", cluster.usage.gpu || 0, cluster.capacity.gpu || 0));
    document.getElementById("cluster-counts").textContent =
      `${cluster.running_jobs} active job(s), ${cluster.queued_jobs} queued across every tenant.`;
    fill(document.querySelector("#queue tbody"), cluster.queue.map((q) => el("tr", {},
      el("td", {class: "num"}, q.position),
      el("td", {}, el("a", {href: `/jobs/${encodeURIComponent(q.id)}`}, q.name), el("div", {class: "muted mono small"}, q.id)),
      el("td", {class: "reason"}, q.waiting || "not yet looked at"),
      expectedStart(q))), "None of your jobs is waiting.", 4);
    fill(document.querySelector("#shares tbody"), shares.items.map((s) => el("tr", {},
      el("th", {scope: "row"}, s.tenant, el("div", {class: "muted small", title: "its data prefix: a job's data.uri lies under it"}, el("code", {}, s.data_prefix || ""))),
      el("td", {class: "num"}, number(s.weight, 2)),
      el("td", {class: "num"}, percent(s.entitled)), el("td", {class: "num"}, percent(s.share_now)),
      el("td", {class: "num"}, number(s.service, 1)),
      el("td", {class: "num"}, limit(s.running_jobs, s.quota.max_running_jobs)),
      el("td", {class: "num"}, limit(s.queued_jobs, s.quota.max_queued_jobs)),
      el("td", {class: "num"}, limit(s.workers, s.quota.max_workers)),
      el("td", {class: "num"}, limit(s.gpu, s.quota.max_gpus)))), "No tenant.", 9);
  }
  // Goodput over time (GET /v1/usage/goodput): the caller's jobs, every tenant's for the admin.
  const windowPick = document.getElementById("goodput-window");
  async function loadGoodput() {
    const [windowS, buckets] = windowPick.value.split(",");
    const report = await api("GET", `/v1/usage/goodput?window_s=${windowS}&buckets=${buckets}`);
    Goodput.history(document.getElementById("goodput-history"), report);
  }
  windowPick.addEventListener("change", () => { loadGoodput(); });

  Brigade.every(3000, load);
  Brigade.every(15000, loadGoodput);
});
