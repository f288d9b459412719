"use strict";
// The compare view: the loss and eval-loss curves of the jobs picked
// (?jobs=ID,ID,...) overlaid, one colour a job (its swatch in the table), each
// job's curve from GET /v1/jobs/{id}/series; a sweep trial's objective beside
// its last losses (GET /v1/jobs/{id}'s `trial`, as its sweep page shows it).
// Refreshes every 2 s until every job has ended.
document.addEventListener("DOMContentLoaded", () => {
  const {api, badge, number, trialObjective, TERMINAL} = Brigade;
  const rows = [...document.querySelectorAll("#compared tbody tr[data-job-id]")];
  if (!rows.length) return;
  const names = rows.map((r) => r.dataset.name);
  // a name shared by two jobs is told apart by the end of the id
  const label = (r, i) => names.indexOf(names[i]) !== names.lastIndexOf(names[i])
    ? `${names[i]} (\u2026${r.dataset.jobId.slice(-6)})` : names[i];
  const last = (s) => s && s.value.length ? s.value[s.value.length - 1] : null;

  let stop = null;
  async function refresh() {
    const found = await Promise.all(rows.map(async (r) => {
      const base = `/v1/jobs/${encodeURIComponent(r.dataset.jobId)}`;
      const [job, s] = await Promise.all([api("GET", base), api("GET", `${base}/series?points=1000`)]);
      return {job, series: s.series};
    }));
    found.forEach(({job, series}, i) => {
      const r = rows[i];
      r.querySelector(".state").replaceChildren(badge(job.state));
      r.querySelector(".step").textContent = `${job.step} / ${job.spec.train.steps}`;
      r.querySelector(".loss").textContent = number(last(series.loss), 3);
      r.querySelector(".eval-loss").textContent = number(last(series.eval_loss), 3);
      r.querySelector(".objective").replaceChildren(...(job.trial ? trialObjective(job.trial) : []));
    });
    const lines = (key) => found.map(({job, series}, i) => ({
      key: job.id, name: label(rows[i], i), cls: `s${i}`, dashed: i >= 4, data: series[key]}));
    const evaluated = found.some(({series}) => series.eval_loss);
    Chart.draw(document.getElementById("chart-loss"), "Loss", lines("loss"), [], (v, d) => number(v, d ?? 3));
    Chart.draw(document.getElementById("chart-eval"), "Eval loss", lines("eval_loss"), [],
      (v, d) => number(v, d ?? 3), evaluated ? {} : {
        note: "No eval loss yet: a job evaluates when its spec has an eval section (eval.every_steps)."});
    if (found.every(({job}) => TERMINAL.has(job.state)) && stop) stop();
  }
  stop = Brigade.every(2000, refresh);
});
