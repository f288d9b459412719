"use strict";
// The cluster: capacity against usage, its nodes (a draining one marked with its deadline, and
// the ranks on each), the caller's queue with why each job waits and when it is expected to
// start, and each tenant's fair share, quota use and data prefix; refreshed every 3 s.
// The goodput of the caller's jobs over time (a window it picks), and their usage and cost
// per flavor over a window it picks, every 15 s.
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

  // A node's state: alive (the head said), gone, or draining with its deadline and reason.
  function nodeState(n) {
    if (!n.alive) {
      return el("td", {class: "node-state"}, el("span", {class: "badge node-dead"}, "gone"),
        n.drain_reason ? el("div", {class: "reason"}, n.drain_reason) : "");
    }
    if (!n.draining) {
      return el("td", {class: "node-state"}, el("span", {class: "badge node-alive"}, "alive"),
        n.head ? el("span", {class: "muted small"}, " head") : "");
    }
    const parts = [el("span", {class: "badge node-draining", "data-state": "draining"}, "\u26a0 draining")];
    if (n.drain_deadline) {
      const when = new Date(n.drain_deadline);
      const left = Math.round((when - Date.now()) / 1000);
      parts.push(el("div", {class: "drain-deadline", title: when.toISOString()},
        left > 0 ? `goes by ${when.toLocaleTimeString()} (in ${left} s)` : `deadline passed at ${when.toLocaleTimeString()}`));
    } else {
      parts.push(el("div", {class: "drain-deadline"}, "no deadline given"));
    }
    if (n.drain_reason) parts.push(el("div", {class: "reason"}, n.drain_reason));
    return el("td", {class: "node-state"}, ...parts);
  }

  function used(n, resource) {
    const total = n.resources.total[resource] || 0;
    if (!n.alive) return total ? `${number(total, 0)} (gone)` : "-";
    return total ? `${number(n.resources.used[resource] || 0, 0)} / ${number(total, 0)}` : "-";
  }

  // The ranks on a node, by job: the job's link, then its ranks there.
  function ranks(n) {
    const byJob = new Map();
    for (const r of n.ranks) byJob.set(r.job, [...(byJob.get(r.job) || []), r.rank]);
    if (!byJob.size) return el("td", {class: "muted"}, "none");
    return el("td", {class: "ranks"}, ...[...byJob].map(([job, rs]) => el("div", {},
      el("a", {href: `/jobs/${encodeURIComponent(job)}`, class: "mono small"}, job),
      ` rank${rs.length > 1 ? "s" : ""} ${rs.sort((a, b) => a - b).join(", ")}`)));
  }

  function labels(n) {
    const shown = Object.entries(n.labels).filter(([k]) => k !== "ray.io/node-id");
    return el("td", {class: "labels small"}, ...(shown.length
      ? shown.map(([k, v]) => el("div", {class: "mono"}, `${k}=${v}`)) : [el("span", {class: "muted"}, "-")]));
  }

  async function load() {
    const [cluster, shares, nodes] = await Promise.all([api("GET", "/v1/cluster"),
      api("GET", "/v1/cluster/tenants"), api("GET", "/v1/cluster/nodes")]);
    fill(document.querySelector("#nodes tbody"), nodes.nodes.map((n) => el("tr",
      {class: n.draining ? "node draining" : n.alive ? "node" : "node gone", "data-node": n.node_id},
      el("th", {scope: "row"}, el("div", {class: "mono small id node-id", title: n.node_id}, n.node_id.slice(0, 12)),
        el("div", {class: "muted small"}, n.address)),
      nodeState(n), labels(n),
      el("td", {class: "num"}, used(n, "cpu")), el("td", {class: "num"}, used(n, "gpu")),
      ranks(n))), "No node answers.", 6);
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
      el("th", {scope: "row", "data-tenant": s.tenant}, s.tenant,
        s.tenant === "admin" ? el("span", {class: "muted small"}, " (the admin key's own jobs)") : null,
        el("div", {class: "muted small", title: "its data prefix: a job's data.uri lies under it"}, el("code", {}, s.data_prefix || ""))),
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

  // Usage and cost over a window (GET /v1/usage): the caller's, each tenant's and the
  // cluster's for the admin; each flavor's cost and worker-hours beside the total.
  const usagePick = document.getElementById("usage-window");
  async function loadUsage() {
    const report = await api("GET", `/v1/usage?window_s=${usagePick.value}`);
    const rows = [...report.tenants, ...(report.cluster ? [report.cluster] : [])];
    fill(document.querySelector("#usage tbody"), rows.map((u) => el("tr", {"data-tenant": u.tenant},
      el("th", {scope: "row"}, u.tenant === "*" ? "the cluster" : u.tenant),
      el("td", {class: "num"}, number(u.worker_seconds / 3600, 2)),
      el("td", {class: "num cost"}, u.cost.toFixed(2)),
      el("td", {class: "flavors"}, ...Object.entries(u.flavors).sort().map(([name, f]) =>
        el("div", {"data-flavor": name}, el("span", {class: "mono"}, name),
          ` ${f.cost.toFixed(2)} (${number(f.worker_seconds / 3600, 2)} h)`))),
      el("td", {class: "num"}, u.goodput === null ? "-" : percent(u.goodput)))), "No usage.", 5);
  }
  usagePick.addEventListener("change", () => { loadUsage(); });

  Brigade.every(3000, load);
  Brigade.every(15000, loadGoodput);
  Brigade.every(15000, loadUsage);
});
