"use strict";
// Submit a job as YAML; a refusal shows the API's own message (it names the field).
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("submit-form");
  const text = document.getElementById("spec-yaml");
  const error = document.getElementById("submit-error");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    Brigade.show(error, "");
    try {
      const job = await Brigade.api("POST", "/ui/jobs", text.value, "application/yaml");
      window.location.assign(`/jobs/${encodeURIComponent(job.id)}`);
    } catch (e) {
      Brigade.show(error, e.field ? `${e.message}` : e.message);
      text.focus();
    }
  });
  document.getElementById("reset-template").addEventListener("click", () => {
    text.value = document.getElementById("yaml-template").content.textContent;
    Brigade.show(error, "");
  });
});
