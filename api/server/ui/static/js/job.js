"use strict";
// A job's page: its curves (downsampled on the server), events, ranks,
// checkpoints, exports, live log and spec, and the actions. Everything but
// the log (a server-sent event stream) refreshes every 2 s until the job ends.
// A dataset's preparation (kind 'prepare') shows its files and their progress
// (one metrics row a file) instead of a model's curves.
document.addEventListener("DOMContentLoaded", () => {
  const {api, el, fill, badge, bytes, number, time, show, TERMINAL} = Brigade;
  const root = document.getElementById("job");
  const id = root.dataset.jobId;
  const base = `/v1/jobs/${encodeURIComponent(id)}`;
  const hasExports = root.dataset.hasExports === "true";
  const prepare = root.dataset.kind === "prepare";
  const result = document.getElementById("action-result");
  let job = null;

  function facts(j) {
    const parts = [
      prepare ? `file ${j.step} of ${j.spec.train.steps}` : `step ${j.step} of ${j.spec.train.steps}`,
      `workers ${j.workers ?? "-"}`,
      `restarts ${j.restarts}`, `recoveries ${j.recoveries ?? 0}`, `preemptions ${j.preemptions}`,
      `priority ${j.priority}`,
      `created ${time(j.created_at)}`,
    ];
    if (j.started_at) parts.push(`started ${time(j.started_at)}`);
    if (j.finished_at) parts.push(`finished ${time(j.finished_at)}`);
    if (j.latest_checkpoint) parts.push(`latest checkpoint: step ${j.latest_checkpoint.step} at world size ${j.latest_checkpoint.world_size}`);
    if (j.waiting) parts.push(`waiting: ${j.waiting}`);
    return parts.join(" \u00b7 ");
  }

  function buttons(state) {
    document.getElementById("suspend").disabled = !["RUNNING", "STARTING"].includes(state);
    document.getElementById("resume").disabled = state !== "SUSPENDED";
    document.getElementById("resume-workers").disabled = state !== "SUSPENDED";
    document.getElementById("cancel").disabled =
      TERMINAL.has(state) || state === "CANCELLING" || state === "PRUNING";
  }

  async function loadJob() {
    job = await api("GET", base);
    document.getElementById("job-state").replaceChildren(badge(job.state));
    document.getElementById("job-facts").textContent = facts(job);
    show(document.getElementById("job-error"), job.error ? `error: ${job.error}` : "");
    const spec = document.getElementById("spec");
    // a preparation's spec without the training sections it carries only as defaults
    const TRAINING = ["model", "data", "train", "sharding", "parallelism", "checkpoint", "init", "eval", "tracking"];
    const shown = prepare ? Object.fromEntries(Object.entries(job.spec).filter(([k]) => !TRAINING.includes(k)))
      : job.spec;
    if (!spec.textContent) spec.textContent = JSON.stringify(shown, null, 2);
    buttons(job.state);
    labels.draw(job);
    const input = document.getElementById("resume-workers");
    if (!input.placeholder || input.placeholder === "as before") input.placeholder = job.spec.workers.min ?? job.spec.workers;
  }

  // its labels and note, and their edit form (static/js/labels.js)
  const labels = Labels.editor("job", base, (saved) => { job = saved; });

  // How many times the larger of two series' last values is the smaller one's.
  function spread(series, a, b) {
    const last = (k) => series[k] && series[k].value.length ? series[k].value[series[k].value.length - 1] : null;
    const x = last(a), y = last(b);
    return x && y ? Math.max(x, y) / Math.min(x, y) : 1;
  }

  // The latest step's model FLOPs utilisation, or its FLOP/s alone where the
  // device's peak is unknown (a CPU): workers/engine/peak_flops.py.
  function compute(series) {
    const last = (k) => series[k] && series[k].value.length ? series[k].value[series[k].value.length - 1] : null;
    const rate = last("flops_per_s");
    if (rate == null) return "";
    const si = (v) => {
      const prefixes = ["", "K", "M", "G", "T", "P"];
      let i = 0;
      while (Math.abs(v) >= 1000 && i < prefixes.length - 1) { v /= 1000; i += 1; }
      return `${v.toPrecision(3)} ${prefixes[i]}FLOP/s`;
    };
    const mfu = last("mfu");
    return mfu == null ? `compute: ${si(rate)} per rank (device peak unknown: no MFU)`
      : `MFU ${(mfu * 100).toFixed(1)}% \u00b7 ${si(rate)} per rank`;
  }

  function line(series, key, name, cls, dashed) {
    return {key, name, cls, dashed, data: series[key]};
  }

  // What the memory chart's two lines are: the engine measures a rank's peak
  // with the CUDA allocator on a GPU and as the process's peak RSS on a CPU
  // (workers/engine/metrics.py, PeakMemory); the theory is the model's state
  // alone. A job asking for GPUs trains on them (a rank without CUDA falls back to the CPU).
  function memoryWords(j) {
    const gpu = Number(j.spec.resources_per_worker.gpu || 0) > 0;
    const theory = "theory: model state per rank (16 B/param \u00f7 N)";
    const state = "Theory: the model's state alone \u2014 fp32 parameters, gradients and Adam's two " +
      "moments, 16 bytes a parameter, sharded over the N ranks.";
    return gpu ? {
      device: "cuda", theory,
      title: "Memory per rank (GPU): the CUDA allocator's peak vs the model state",
      measured: "measured: CUDA allocator peak",
      note: "Measured: the CUDA caching allocator's peak in each step (torch.cuda." +
        "max_memory_allocated) \u2014 the model state plus activations, gathered FSDP units and " +
        "communication buffers. " + state,
    } : {
      device: "cpu", theory,
      title: "Memory per rank (CPU): process resident memory vs the model state",
      measured: "measured: process peak RSS",
      note: "Measured: the rank process's peak resident memory (RSS) \u2014 the Python " +
        "interpreter, torch, the data pipeline and the allocator's slack as well as the model; " +
        "it never goes down within an attempt. " + state + " The gap is the process, not the model.",
    };
  }

  async function loadSeries() {
    const s = await api("GET", `${base}/series?points=2000`);
    if (prepare) {
      const figure = document.getElementById("chart-throughput");
      figure.dataset.rows = s.rows;
      Chart.draw(figure, "Tokenizing speed (tokens/s, each file)",
        [line(s.series, "tokens_per_s", "tokens/s", "c3")], s.marks, (v, d) => number(v, d), {xLabel: "file"});
      return;
    }
    const marks = s.marks;
    document.getElementById("job-compute").textContent = compute(s.series);
    const figures = {
      loss: document.getElementById("chart-loss"),
      throughput: document.getElementById("chart-throughput"),
      memory: document.getElementById("chart-memory"),
      comm: document.getElementById("chart-comm"),
    };
    figures.loss.dataset.rows = s.rows;
    Chart.draw(figures.loss, "Loss", [line(s.series, "loss", "loss", "c1"),
      line(s.series, "eval_loss", "eval loss", "c2", true)], marks, (v, d) => number(v, d ?? 3));
    Chart.draw(figures.throughput, "Throughput (tokens/s)",
      [line(s.series, "tokens_per_s", "tokens/s", "c3")], marks, (v, d) => number(v, d));
    const memory = memoryWords(job);
    figures.memory.dataset.device = memory.device;
    Chart.draw(figures.memory, memory.title,
      [line(s.series, "peak_mem_bytes", memory.measured, "c4"),
        line(s.series, "mem_theory_bytes", memory.theory, "c5", true)],
      marks, bytes, {log: spread(s.series, "peak_mem_bytes", "mem_theory_bytes") > 20, base: 1024,
        note: memory.note});
    Chart.draw(figures.comm, "Bytes moved per step vs the formula",
      [line(s.series, "comm_bytes", "measured", "c6"), line(s.series, "comm_bytes_theory", "theory", "c5", true)],
      marks, bytes, {base: 1024});
  }

  // A preparation's files: one metrics row a file (its step is the file's
  // place in the spec's list, from 1), read from where the last read stopped.
  const SHOWN_FILES = 500;
  const fileRows = new Map();
  let filesSince = 0;
  const count = (n) => (n ?? 0).toLocaleString("en");

  async function loadPrepare() {
    const rows = await api("GET", `${base}/metrics?since_step=${filesSince}`);
    for (const r of rows) fileRows.set(r.step, r);
    if (rows.length) filesSince = rows[rows.length - 1].step + 1;
    const p = job.spec.prepare;
    const files = p.inputs;
    const done = [...fileRows.values()];
    const sum = (k) => done.reduce((a, r) => a + (r[k] || 0), 0);
    const progress = document.getElementById("prepare-progress");
    progress.max = files.length;
    progress.value = Math.min(job.step, files.length);
    document.getElementById("prepare-summary").textContent =
      `${count(job.step)} of ${count(files.length)} file${files.length === 1 ? "" : "s"} tokenized` +
      ` \u00b7 ${count(sum("tokens"))} tokens \u00b7 ${count(sum("documents"))} documents` +
      ` \u00b7 ${count(sum("shards"))} shards` +
      (job.state === "SUCCEEDED" ? " \u00b7 the dataset is written" : "");
    const where = document.getElementById("prepare-where");
    if (!where.childElementCount) {
      const pairs = [["Output", p.output],
        ["Tokenizer", p.tokenizer || `trained on the inputs (${count(p.train_vocab_size)} ids)`],
        ["Field", p.field], ["Tokens a shard", count(p.tokens_per_shard)]];
      where.replaceChildren(...pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {class: "mono"}, v)]));
    }
    const running = ["RUNNING", "STARTING"].includes(job.state);
    const width = job.workers || 1;
    const shown = files.slice(0, SHOWN_FILES).map((uri, i) => {
      const r = fileRows.get(i + 1);
      const busy = !r && running && i >= job.step && i < job.step + width;
      return el("tr", {"data-file": i + 1, class: r ? "done" : busy ? "busy" : "todo"},
        el("td", {class: "num"}, i + 1),
        el("td", {class: "mono path", title: uri}, uri.split("/").pop()),
        el("td", {class: "nowrap"}, r ? "\u2713 done" : busy ? "\u25D4 tokenizing" : "waiting"),
        el("td", {class: "num"}, r ? count(r.tokens) : "-"),
        el("td", {class: "num hide-narrow"}, r ? count(r.documents) : "-"),
        el("td", {class: "num hide-narrow"}, r ? count(r.shards) : "-"),
        el("td", {class: "num hide-narrow"}, r && r.file_s != null ? r.file_s.toFixed(2) : "-"),
        el("td", {class: "num"}, r ? number(r.tokens_per_s) : "-"));
    });
    fill(document.querySelector("#prepare-files tbody"), shown, "No files.", 8);
    show(document.getElementById("prepare-files-note"), files.length > SHOWN_FILES ?
      `The first ${count(SHOWN_FILES)} of ${count(files.length)} files.` : "");
  }

  async function loadTables() {
    const [events, checkpoints, workers] = await Promise.all([
      api("GET", `${base}/events`), prepare ? [] : api("GET", `${base}/checkpoints`), api("GET", `${base}/workers`)]);
    fill(document.querySelector("#events tbody"), events.slice().reverse().map((e) => el("tr", {},
      el("td", {class: "nowrap"}, time(e.time)), el("td", {class: "hide-narrow"}, e.from_state ? badge(e.from_state) : "-"),
      el("td", {}, badge(e.to_state)), el("td", {class: "reason"}, e.reason))), "No events.", 4);
    if (prepare) await loadPrepare();
    else fill(document.querySelector("#checkpoints tbody"), checkpoints.slice().reverse().map((c) => el("tr", {},
      el("td", {class: "num"}, c.step), el("td", {class: "num"}, c.world_size),
      el("td", {class: "num"}, bytes(c.bytes)), el("td", {}, time(c.created_at)))), "No committed checkpoint yet.", 4);
    fill(document.querySelector("#workers tbody"), workers.map((w) => el("tr", {},
      el("td", {class: "num"}, w.rank), el("td", {class: "mono"}, w.node || "-"),
      el("td", {class: "num"}, w.pid ?? "-"), el("td", {}, w.state))), "No ranks running.", 4);
    if (hasExports) {
      const exports = await api("GET", `${base}/exports`);
      fill(document.querySelector("#exports tbody"), exports.slice().reverse().map((x) => el("tr", {},
        el("td", {}, el("span", {class: "mono id export-id", title: x.id}, x.id)), el("td", {class: "num"}, x.step), el("td", {}, x.dtype),
        el("td", {class: "num"}, bytes(x.bytes)),
        el("td", {class: "files"}, Object.entries(x.files).map(([name, f]) => el("a", {
          href: `${base}/exports/${encodeURIComponent(x.id)}/files/${encodeURIComponent(name)}`,
          download: name, title: `sha256 ${f.sha256}`}, `${name} (${bytes(f.size)})`))))),
      "No committed export yet.", 5);
    }
  }

  // Where the job's time went since submit (GET .../goodput): a stacked bar of its phases,
  // redrawn every 10 s while the job runs (it reads every row: a long job's take a while)
  // and once more when it has ended.
  let goodputAt = 0;
  async function loadGoodput() {
    if (!TERMINAL.has(job.state) && Date.now() - goodputAt < 10000) return;
    goodputAt = Date.now();
    const g = await api("GET", `${base}/goodput`);
    document.getElementById("goodput-figure").textContent =
      g.goodput === null ? "" : `goodput ${Goodput.percent(g.goodput, 1)}`;
    Goodput.bar(document.getElementById("goodput-bar"), g);
  }

  let stop = null;
  async function refresh() {
    await loadJob();
    await Promise.all([loadSeries(), loadTables(), loadGoodput()]);
    if (TERMINAL.has(job.state) && stop) stop();
  }
  stop = Brigade.every(2000, refresh);

  // The log: server-sent events, resumed by the browser from the last line it got.
  const log = document.getElementById("log");
  const logStatus = document.getElementById("log-status");
  const stream = new EventSource(`${base}/logs?follow=true`);
  stream.addEventListener("log", (event) => {
    const lineData = JSON.parse(event.data);
    const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.append(document.createTextNode(lineData.line + "\n"));
    if (atBottom) log.scrollTop = log.scrollHeight;
  });
  stream.addEventListener("progress", () => { logStatus.textContent = "(live)"; });
  stream.addEventListener("end", () => { logStatus.textContent = "(the job has ended)"; stream.close(); });
  stream.addEventListener("error", () => { if (stream.readyState === EventSource.CLOSED) logStatus.textContent = ""; });

  async function act(action, body) {
    show(result, "");
    try {
      await api("POST", `${base}/${action}`, body);
      result.textContent = `${action}: requested`;
      if (!stop || TERMINAL.has(job.state)) stop = Brigade.every(2000, refresh);
      else await refresh();
    } catch (e) {
      result.textContent = `${action} refused: ${e.message}`;
    }
    result.hidden = false;
  }
  document.getElementById("suspend").addEventListener("click", () => act("suspend"));
  const exportButton = document.getElementById("export");
  if (exportButton) exportButton.addEventListener("click", () => act("exports", {}));
  document.getElementById("cancel").addEventListener("click", () => act("cancel"));
  document.getElementById("resume").addEventListener("click", () => {
    const n = document.getElementById("resume-workers").value.trim();
    act("resume", n ? {workers: Number(n)} : {});
  });
});
