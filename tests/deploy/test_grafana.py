"""The Grafana dashboard in deploy/ asks only for metrics Brigade exports:
every query's `brigade_*` names are in a live /metrics scrape (after a few
requests, so the labelled series exist too)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import http, server, supervisor  # noqa: F401 (fixtures: a live server)

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "brigade-dashboard.json"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}


def exported(text: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {family.name} | {f"{family.name}{s}" for s in SUFFIXES.get(family.type, ())}
        names |= {sample.name for sample in family.samples}
    return names


def test_every_dashboard_query_names_an_exported_metric(server, http):  # noqa: F811
    http.get("/v1/jobs")
    http.get("/v1/jobs/j-000000000000")  # a 404 of a templated route
    scraped = httpx.get(f"{server.url}/metrics")
    assert scraped.status_code == 200
    names = exported(scraped.text)
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert queries and all(re.search(r"\bbrigade_", q) for q in queries)
    asked = {name for q in queries for name in re.findall(r"\bbrigade_[a-z0-9_]+", q)}
    assert asked - names == set(), f"not exported: {sorted(asked - names)}"
    for needed in ("brigade_http_requests_total", "brigade_http_request_duration_seconds_bucket",
                   "brigade_jobs", "brigade_job_restarts_total", "brigade_job_preemptions_total",
                   "brigade_recoveries_total",
                   "brigade_scheduling_pass_duration_seconds_bucket",
                   "brigade_job_recovery_duration_seconds_bucket",
                   "brigade_checkpoint_save_duration_seconds_bucket",
                   "brigade_cluster_capacity", "brigade_cluster_usage"):
        assert needed in asked, f"the dashboard shows no {needed}"
