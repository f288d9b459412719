"use strict";
// A run's labels and note, on the job page and a sweep's page: each label a chip (a
// link to the jobs list filtered on it: a sweep's trials carry its labels), the note,
// and their edit form (`key=value`, one a line), filled from the run until someone
// types in it and saved with PATCH {labels, note} to the run's own URL, which answers
// the run as it is now. The markup is templates/_labels.html's, its ids by `what`.
const Labels = (() => {
  const {api, el, labelChips, show} = Brigade;
  const labelsText = (labels) => Object.entries(labels).map(([k, v]) => `${k}=${v}`).join("\n");

  // what: "job" or "sweep"; url: the run's (`/v1/jobs/ID`); saved(run): after a save
  function editor(what, url, saved) {
    const labelsInput = document.getElementById("labels-input");
    const noteInput = document.getElementById("note-input");
    let edited = false;
    function draw(run) {
      const chips = labelChips(run.labels, "/", "jobs");
      document.getElementById(`${what}-labels`).replaceChildren(
        ...(chips.length ? chips : [el("span", {class: "muted small"}, "No labels.")]));
      show(document.getElementById(`${what}-note`), run.note || "");
      if (!edited) {
        labelsInput.value = labelsText(run.labels || {});
        noteInput.value = run.note || "";
      }
    }
    for (const input of [labelsInput, noteInput]) input.addEventListener("input", () => { edited = true; });
    document.getElementById("labels-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const out = document.getElementById("labels-result");
      const labels = {};
      for (const text of labelsInput.value.split("\n").map((l) => l.trim()).filter(Boolean)) {
        const at = text.indexOf("=");
        if (at < 1) { out.textContent = `not key=value: ${text}`; return; }
        labels[text.slice(0, at).trim()] = text.slice(at + 1).trim();
      }
      try {
        const run = await api("PATCH", url, {labels, note: noteInput.value.trim() || null});
        edited = false;
        draw(run);
        if (saved) saved(run);
        out.textContent = "saved";
      } catch (e) {
        out.textContent = `refused: ${e.message}`;
      }
    });
    return {draw};
  }

  return {editor};
})();
