// Shared by every page: the JSON API with the session cookie and its CSRF
// token, DOM building without innerHTML (data never becomes markup), state
// badges and number formats.
"use strict";

const Brigade = (() => {
  const csrfMeta = document.querySelector('meta[name="csrf-token"]');
  const csrf = csrfMeta ? csrfMeta.content : "";

  class ApiError extends Error {
    constructor(status, message, field) {
      super(message);
      this.status = status;
      this.field = field;
    }
  }

  // fetch(path) with the session cookie; a state-changing request carries
  // the CSRF token. Resolves to the parsed JSON (null for 204), rejects with
  // ApiError carrying the API's own message.
  async function api(method, path, body, contentType) {
    const headers = {"Accept": "application/json"};
    if (method !== "GET") headers["X-CSRF-Token"] = csrf;
    let payload;
    if (body !== undefined) {
      headers["Content-Type"] = contentType || "application/json";
      payload = contentType ? body : JSON.stringify(body);
    }
    const response = await fetch(path, {method, headers, body: payload, credentials: "same-origin"});
    if (response.status === 401 && document.body.dataset.page !== "login") {
      window.location.assign("/login?next=" + encodeURIComponent(location.pathname + location.search));
      throw new ApiError(401, "signed out");
    }
    if (response.status === 204) return null;
    const data = await response.json().catch(() => null);
    if (!response.ok) {
      const error = (data && data.error) || {};
      throw new ApiError(response.status, error.message || `HTTP ${response.status}`, error.field);
    }
    return data;
  }

  // el("a", {href: "/x", class: "y"}, "text", child, ...)
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function fill(tbody, rows, emptyText, columns) {
    tbody.replaceChildren();
    if (!rows.length) {
      tbody.append(el("tr", {class: "empty"}, el("td", {colspan: columns}, emptyText)));
      return;
    }
    for (const row of rows) tbody.append(row);
  }

  // Okabe-Ito colours (safe for the common colour-blindnesses), always with the name.
  const STATE_CLASS = {
    QUEUED: "queued", STARTING: "starting", RUNNING: "running", SUSPENDING: "suspended",
    SUSPENDED: "suspended", PREEMPTING: "preempting", RESTARTING: "preempting",
    CANCELLING: "cancelled", SUCCEEDED: "succeeded", FAILED: "failed", CANCELLED: "cancelled",
    PRUNING: "pruned", PRUNED: "pruned",
  };
  const STATE_MARK = {
    QUEUED: "\u25CB", STARTING: "\u25D4", RUNNING: "\u25B6", SUSPENDING: "\u2016", SUSPENDED: "\u2016",
    PREEMPTING: "\u21BB", RESTARTING: "\u21BB", CANCELLING: "\u2715", SUCCEEDED: "\u2713",
    FAILED: "!", CANCELLED: "\u2715", PRUNING: "\u2702", PRUNED: "\u2702",
  };
  const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED", "PRUNED"]);

  function badge(state) {
    return el("span", {class: `badge state-${STATE_CLASS[state] || "other"}`, "data-state": state},
      el("span", {"aria-hidden": "true"}, STATE_MARK[state] || "?"), " ", state);
  }

  // digits: decimals (default one in KiB and up, none in bytes)
  function bytes(n, digits) {
    if (n === null || n === undefined) return "-";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0, v = Number(n);
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return `${v.toFixed(digits ?? (i ? 1 : 0))} ${units[i]}`;
  }

  // digits: decimals (default by magnitude); in thousands (k) and millions (M), at least one
  function number(v, digits) {
    if (v === null || v === undefined) return "-";
    if (v === 0) return "0";
    const abs = Math.abs(v);
    const scaled = Math.max(1, digits ?? 1);
    if (digits === undefined) digits = abs >= 100 ? 0 : abs >= 1 ? 2 : 4;
    if (abs >= 1e6) return (v / 1e6).toFixed(scaled) + "M";
    if (abs >= 1e4) return (v / 1e3).toFixed(scaled) + "k";
    return Number(v).toFixed(digits);
  }

  // A sweep trial's objective (a job's `trial`), as its sweep's page shows it: the value, and
  // a pruned trial's pruning step, since that value is from there, not from its last step.
  function trialObjective(trial) {
    const value = el("span", {class: "objective-value",
      title: `trial ${trial.number}'s objective, ${trial.metric}, as its sweep judges it`},
      number(trial.objective, 4));
    return trial.pruned_step === null || trial.pruned_step === undefined ? [value]
      : [value, el("div", {class: "muted small pruned-at"}, `at pruning step ${trial.pruned_step}`)];
  }

  // A run's labels as chips, sorted by key, each a link to the list `list` ("/" the jobs',
  // "/sweeps" the sweeps') filtered on it; [] where it has none.
  function labelChips(labels, list, what) {
    return Object.entries(labels || {}).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => el("a", {
      class: "label-chip", href: `${list}?label=${encodeURIComponent(`${k}=${v}`)}`, title: `${what} labelled ${k}=${v}`},
    el("span", {class: "label-key"}, k), el("span", {class: "label-value"}, v)));
  }

  // A note's first line, cut at `chars` with an ellipsis (the whole note goes in a title).
  function shortNote(note, chars) {
    const text = (note || "").trim();
    const first = text.split("\n", 1)[0];
    if (first.length > chars) return first.slice(0, chars - 1).trimEnd() + "\u2026";
    return first.length < text.length ? `${first} \u2026` : first;
  }

  function time(iso) {
    if (!iso) return "-";
    const d = new Date(iso);
    return d.toLocaleString(undefined, {year: "numeric", month: "short", day: "numeric",
      hour: "2-digit", minute: "2-digit", second: "2-digit"});
  }

  function percent(v) { return `${(100 * (v || 0)).toFixed(0)}%`; }

  function show(node, message) {
    node.textContent = message || "";
    node.hidden = !message;
  }

  // Repeat `task` every `ms` while the page is visible, one run at a time.
  function every(ms, task) {
    let timer = null, stopped = false;
    async function tick() {
      if (stopped) return;
      try { await task(); } catch (e) { if (!(e instanceof ApiError)) throw e; }
      if (!stopped) timer = setTimeout(tick, ms);
    }
    tick();
    return () => { stopped = true; clearTimeout(timer); };
  }

  document.addEventListener("DOMContentLoaded", () => {
    const out = document.getElementById("sign-out");
    if (out) out.addEventListener("click", async () => {
      try { await api("POST", "/ui/session/end"); } finally { window.location.assign("/login"); }
    });
  });

  return {api, ApiError, el, fill, badge, bytes, number, trialObjective, labelChips, shortNote, time,
    percent, show, every, TERMINAL};
})();
