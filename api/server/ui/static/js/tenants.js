"use strict";
// The admin's tenants: quotas, weights, budgets and usage; change them, rotate a key
// (the new key is shown once), create and delete tenants.
document.addEventListener("DOMContentLoaded", () => {
  const {api, el, fill, number, show} = Brigade;
  const QUOTA = ["max_workers", "max_gpus", "max_running_jobs", "max_queued_jobs"];
  const editSection = document.getElementById("edit-tenant");
  const editForm = document.getElementById("edit-form");
  const editError = document.getElementById("edit-error");
  const newKey = document.getElementById("new-key");
  let editing = null;

  function showKey(title, key) {
    document.getElementById("new-key-title").textContent = title;
    document.getElementById("new-key-value").textContent = key;
    newKey.hidden = false;
    document.getElementById("new-key-done").focus();
  }
  document.getElementById("new-key-done").addEventListener("click", () => {
    document.getElementById("new-key-value").textContent = "";
    newKey.hidden = true;
  });

  function used(u, max) { return `${number(u || 0, 0)} / ${max === null || max === undefined ? "\u221e" : max}`; }

  async function load() {
    const [tenants, shares] = await Promise.all([api("GET", "/v1/tenants"), api("GET", "/v1/cluster/tenants")]);
    const usage = Object.fromEntries(shares.items.map((s) => [s.tenant, s]));
    fill(document.querySelector("#tenants tbody"), tenants.items.map((t) => {
      const u = usage[t.name] || {};
      return el("tr", {"data-tenant": t.name},
        el("th", {scope: "row"}, t.name, el("div", {class: "muted mono small"}, t.id)),
        el("td", {class: "num"}, number(t.weight, 2)), el("td", {class: "num"}, t.max_priority),
        el("td", {class: "num"}, used(u.workers, t.quota.max_workers)),
        el("td", {class: "num"}, used(u.gpu, t.quota.max_gpus)),
        el("td", {class: "num"}, used(u.running_jobs, t.quota.max_running_jobs)),
        el("td", {class: "num"}, used(u.queued_jobs, t.quota.max_queued_jobs)),
        el("td", {class: "budget"}, t.budget ? `${t.budget.limit} a ${t.budget.period}` : "none"),
        el("td", {}, el("div", {class: "row-actions"},
          el("button", {type: "button", class: "edit", onclick: () => edit(t)}, "Change"),
          el("button", {type: "button", class: "rotate", onclick: () => rotate(t)}, "Rotate key"),
          el("button", {type: "button", class: "danger delete", onclick: () => remove(t)}, "Delete"))));
    }), "No tenants yet.", 9);
  }

  function edit(t) {
    editing = t;
    document.getElementById("edit-name").textContent = t.name;
    editForm.weight.value = t.weight;
    editForm.max_priority.value = t.max_priority;
    for (const q of QUOTA) editForm[q].value = t.quota[q] ?? "";
    editForm.budget_limit.value = t.budget ? t.budget.limit : "";
    editForm.budget_period.value = t.budget ? t.budget.period : "month";
    show(editError, "");
    editSection.hidden = false;
    editForm.weight.focus();
  }
  document.getElementById("edit-cancel").addEventListener("click", () => { editSection.hidden = true; });

  function value(input) { return input.value.trim() === "" ? null : Number(input.value); }

  editForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const quota = Object.fromEntries(QUOTA.map((q) => [q, value(editForm[q])]));
    const limit = value(editForm.budget_limit);
    const body = {quota, weight: value(editForm.weight) ?? editing.weight,
      max_priority: value(editForm.max_priority) ?? editing.max_priority,
      budget: limit === null ? null : {limit, period: editForm.budget_period.value}};
    try {
      await api("PATCH", `/v1/tenants/${encodeURIComponent(editing.id)}`, body);
      editSection.hidden = true;
      await load();
    } catch (e) { show(editError, e.message); }
  });

  async function rotate(t) {
    if (!window.confirm(`Rotate ${t.name}'s key? The old key, and every session signed in with it, stop working now.`)) return;
    try {
      const rotated = await api("POST", `/v1/tenants/${encodeURIComponent(t.id)}/keys`);
      showKey(`New key for ${t.name}.`, rotated.api_key);
    } catch (e) { window.alert(e.message); }
  }

  async function remove(t) {
    if (!window.confirm(`Delete ${t.name} and its finished jobs?`)) return;
    try { await api("DELETE", `/v1/tenants/${encodeURIComponent(t.id)}`); await load(); }
    catch (e) { window.alert(e.message); }
  }

  const createForm = document.getElementById("create-form");
  const createError = document.getElementById("create-error");
  createForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    show(createError, "");
    const body = {name: createForm.elements["name"].value.trim(), weight: value(createForm.weight) ?? 1,
      quota: {max_workers: value(createForm.max_workers), max_queued_jobs: value(createForm.max_queued_jobs)}};
    try {
      const created = await api("POST", "/v1/tenants", body);
      createForm.reset();
      showKey(`Tenant ${created.name} created; its key:`, created.api_key);
      await load();
    } catch (e) { show(createError, e.message); }
  });

  Brigade.every(5000, load);
});
