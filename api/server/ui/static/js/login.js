"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("login-form");
  const error = document.getElementById("login-error");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    Brigade.show(error, "");
    const key = document.getElementById("api-key").value.trim();
    try {
      await Brigade.api("POST", "/ui/session", {api_key: key});
    } catch (e) {
      Brigade.show(error, e.message);
      return;
    }
    const next = new URLSearchParams(location.search).get("next") || "/";
    // Only a path on this server: never an open redirect.
    window.location.assign(next.startsWith("/") && !next.startsWith("//") ? next : "/");
  });
});
