"""Offline checks of deploy/: the image, the compose stack, the KubeRay manifests.

Nothing here builds an image or talks to a cluster (no network at test time):

- every YAML file parses, with no duplicate keys (yamllint);
- Kubernetes objects validate against the real Kubernetes JSON schemas that
  `kubernetes-validate` bundles, strictly (an unknown or misspelt field fails);
  the RayCluster's pod templates against core/v1 PodTemplateSpec, the rest of
  it against KubeRay's ray.io/v1 structure as written out below;
- compose.yaml validates against the compose specification's JSON schema (the
  copy `check-jsonschema` vendors), then its wiring: who depends on whom, one
  token for every Ray node, no published port but Brigade's API;
- NetworkPolicies, evaluated here: tenants reach Brigade's API port and never
  a Ray port;
- every BRIGADE_* variable any of these files (or docs/deploy.md) names is a
  real field of service.settings.Settings, and the environments given to the
  service build a valid production Settings;
- the Dockerfile parses, has the VARIANT build argument whose cpu/cuda logic is
  run here with a stub pip, pins the torch that CI installs and the Ray the
  RayCluster declares, and copies every package pyproject.toml lists;
- the entrypoint and deploy/gen-env.sh, run with stub `ray` and `brigade`.
"""

from __future__ import annotations

import copy
import importlib.resources
import ipaddress
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from dockerfile_parse import DockerfileParser
from kubernetes_validate import utils as kv_utils
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from referencing import Registry, Resource
from yamllint import linter as yamllint_linter
from yamllint.config import YamlLintConfig

from service.settings import Settings
from tests.ci import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERAY = DEPLOY / "kuberay"
COMPOSE = DEPLOY / "compose.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
ENTRYPOINT = DEPLOY / "entrypoint.sh"
GEN_ENV = DEPLOY / "gen-env.sh"
DRAIN_NODE = DEPLOY / "drain-node.sh"  # the Ray worker pods' preStop hook
DRAIN_HOOK = "/usr/local/bin/brigade-drain-node"  # where the image has it
DOCS = ROOT / "docs" / "deploy.md"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# What the service runs on: the lean install's requirements and the `server` extra's.
SERVER_REQUIREMENTS = [*PYPROJECT["project"]["dependencies"],
                       *PYPROJECT["project"]["optional-dependencies"]["server"]]

MIN_KUBERNETES = Version("1.30")  # the oldest Kubernetes these manifests claim to fit
RAY_TOKEN_AUTH_SINCE = Version("2.52")
# Ray's fixed ports: GCS, dashboard, client server, dashboard agent, metrics (KubeRay's).
RAY_PORTS = {6379, 8265, 10001, 52365, 8080}
# Environment variables the `brigade` client commands read (not Settings fields).
CLIENT_ENV = {"BRIGADE_URL", "BRIGADE_API_KEY"}
SETTINGS_ENV = {f"BRIGADE_{name.upper()}" for name in Settings.model_fields}
BRIGADE_NAME = re.compile(r"\bBRIGADE_[A-Z][A-Z0-9_]*\b")


# -- loading -------------------------------------------------------------------


def yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml"))


def load_all(path: Path) -> list:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def kuberay_docs() -> list[dict]:
    docs = []
    for path in sorted(KUBERAY.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += load_all(path)
    return docs


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


# -- every YAML file -----------------------------------------------------------


def test_deploy_has_the_expected_files():
    for path in (DOCKERFILE, COMPOSE, ENTRYPOINT, GEN_ENV, DRAIN_NODE, KUBERAY / "kustomization.yaml",
                 DOCS):
        assert path.is_file(), path
    assert len(yaml_files()) >= 6


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_parses_and_lints(path: Path):
    docs = load_all(path)
    assert docs and all(isinstance(d, dict) for d in docs), f"{path}: every document a mapping"
    problems = list(yamllint_linter.run(path.read_text(), _YAMLLINT, str(path)))
    assert not problems, "\n".join(f"{path}:{p.line}:{p.column} {p.rule}: {p.desc}" for p in problems)


# Only what changes meaning: duplicate keys (PyYAML silently keeps the last),
# aliases of undeclared anchors, and yes/no/on/off (YAML 1.1 booleans).
_YAMLLINT = YamlLintConfig(
    "rules:\n"
    "  key-duplicates: enable\n"
    "  anchors: enable\n"
    "  truthy: {allowed-values: ['true', 'false'], check-keys: true}\n"
)


def test_yamllint_catches_a_duplicate_key():
    text = "a: 1\nb: 2\na: 3\n"
    assert yaml.safe_load(text) == {"a": 3, "b": 2}  # what PyYAML alone would let through
    assert [p.rule for p in yamllint_linter.run(text, _YAMLLINT)] == ["key-duplicates"]


# -- Kubernetes schemas ----------------------------------------------------------


def kubernetes_versions() -> list[str]:
    versions = [v for v in kv_utils.all_versions() if Version(v) >= MIN_KUBERNETES]
    assert versions, f"kubernetes-validate bundles no schema for Kubernetes >= {MIN_KUBERNETES}"
    return sorted({versions[0], versions[-1]}, key=Version)


def core_docs() -> list[dict]:
    return [d for d in kuberay_docs() if not d["apiVersion"].startswith("ray.io/")]


@pytest.mark.parametrize("version", kubernetes_versions())
def test_kubernetes_objects_match_the_kubernetes_schemas(version):
    docs = core_docs()
    assert {d["kind"] for d in docs} >= {"Namespace", "Secret", "ServiceAccount", "Deployment",
                                         "Service", "NetworkPolicy", "PodDisruptionBudget"}
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_kubernetes_schema_check_is_strict():
    deployment = copy.deepcopy(one(core_docs(), "Deployment", "brigade"))
    deployment["spec"]["replica"] = 1  # a typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, kubernetes_versions()[-1], strict=True)
    deployment = copy.deepcopy(one(core_docs(), "Deployment", "brigade"))
    deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8000"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, kubernetes_versions()[-1], strict=True)


def validate_definition(instance, definition: str, version: str) -> None:
    """Validate a part of an object against one of Kubernetes' definitions (strict)."""
    folder = f"kubernetes-json-schema/v{version}-local-strict"
    defs = kv_utils.schema_contents(f"{folder}/_definitions.json", version)
    registry = Resource.from_contents(defs) @ Registry()
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "$ref": f"{defs['$id']}#/$defs/{definition}"}
    jsonschema.Draft202012Validator(schema, registry=registry).validate(instance)


# -- the RayCluster (ray.io/v1), checked against KubeRay's structure -------------

RAYCLUSTER_SPEC_FIELDS = {
    "headGroupSpec", "workerGroupSpecs", "rayVersion", "enableInTreeAutoscaling",
    "autoscalerOptions", "headServiceAnnotations", "suspend", "managedBy",
    "gcsFaultToleranceOptions", "authOptions", "upgradeStrategy",
}
HEAD_GROUP_FIELDS = {"serviceType", "headService", "enableIngress", "rayStartParams", "template",
                     "resources", "labels"}
WORKER_GROUP_FIELDS = {"groupName", "replicas", "minReplicas", "maxReplicas", "numOfHosts",
                       "rayStartParams", "template", "scaleStrategy", "suspend",
                       "idleTimeoutSeconds", "resources", "labels"}
INT32_MAX = 2**31 - 1
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def raycluster() -> dict:
    return one(kuberay_docs(), "RayCluster")


def raycluster_problems(rc: dict, version: str) -> list[str]:
    """What KubeRay's CRD (ray.io/v1) would refuse or silently drop."""
    problems = []

    def check(ok, message):
        if not ok:
            problems.append(message)

    def check_start_params(where, params):
        check(isinstance(params, dict), f"{where}.rayStartParams must be a map")
        for key, value in (params or {}).items():
            # map[string]string: an unquoted 0 or true is refused by the API server.
            check(isinstance(key, str) and isinstance(value, str),
                  f"{where}.rayStartParams[{key!r}] must be a string, not {type(value).__name__}")

    def check_template(where, template):
        try:
            validate_definition(template, "io.k8s.api.core.v1.PodTemplateSpec", version)
        except jsonschema.ValidationError as e:
            problems.append(f"{where}.template: {e.message} at {list(e.absolute_path)}")

    check(rc.get("apiVersion") == "ray.io/v1", "apiVersion must be ray.io/v1")
    check(DNS_LABEL.match(rc.get("metadata", {}).get("name", "")), "metadata.name: a DNS label")
    spec = rc.get("spec")
    if not isinstance(spec, dict):
        return problems + ["spec must be a map"]
    check(not set(spec) - RAYCLUSTER_SPEC_FIELDS, f"unknown spec fields {set(spec) - RAYCLUSTER_SPEC_FIELDS}")
    check(isinstance(spec.get("rayVersion"), str), "spec.rayVersion must be a string")
    head = spec.get("headGroupSpec")
    if not isinstance(head, dict):
        return problems + ["spec.headGroupSpec is required"]
    check(not set(head) - HEAD_GROUP_FIELDS, f"unknown headGroupSpec fields {set(head) - HEAD_GROUP_FIELDS}")
    check("template" in head, "headGroupSpec.template is required")
    check("rayStartParams" in head, "headGroupSpec.rayStartParams is required (by older KubeRay CRDs)")
    check_start_params("headGroupSpec", head.get("rayStartParams"))
    check_template("headGroupSpec", head.get("template"))
    check(head.get("serviceType", "ClusterIP") in ("ClusterIP", "NodePort", "LoadBalancer"),
          "headGroupSpec.serviceType")
    groups = spec.get("workerGroupSpecs", [])
    check(isinstance(groups, list), "spec.workerGroupSpecs must be a list")
    names = [g.get("groupName") for g in groups]
    check(len(names) == len(set(names)), f"groupName must be unique: {names}")
    for i, group in enumerate(groups):
        where = f"workerGroupSpecs[{i}]"
        check(not set(group) - WORKER_GROUP_FIELDS,
              f"unknown {where} fields {set(group) - WORKER_GROUP_FIELDS}")
        for field in ("groupName", "template", "rayStartParams", "minReplicas", "maxReplicas"):
            check(field in group, f"{where}.{field} is required")
        check(isinstance(group.get("groupName"), str) and DNS_LABEL.match(group.get("groupName", "")),
              f"{where}.groupName: a DNS label")
        counts = {f: group.get(f) for f in ("replicas", "minReplicas", "maxReplicas", "numOfHosts")}
        for field, value in counts.items():
            if value is not None:
                check(isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT32_MAX,
                      f"{where}.{field} must be an int32 >= 0, not {value!r}")
        low, high = counts["minReplicas"], counts["maxReplicas"]
        replicas = counts["replicas"] if counts["replicas"] is not None else 0
        if all(isinstance(v, int) for v in (low, high, replicas)):
            check(low <= replicas <= high, f"{where}: minReplicas <= replicas <= maxReplicas")
        check_start_params(where, group.get("rayStartParams"))
        check_template(where, group.get("template"))
    return problems


@pytest.mark.parametrize("version", kubernetes_versions())
def test_raycluster_matches_kuberay_structure(version):
    assert raycluster_problems(raycluster(), version) == []


@pytest.mark.parametrize("break_it, expected", [
    (lambda rc: rc["spec"]["headGroupSpec"]["rayStartParams"].update({"num-cpus": 0}), "must be a string"),
    (lambda rc: rc["spec"]["workerGroupSpecs"][0].update({"minReplicas": 99}), "minReplicas <= replicas"),
    (lambda rc: rc["spec"]["workerGroupSpecs"][0].update({"replica": 2}), "unknown"),
    (lambda rc: rc["spec"]["workerGroupSpecs"][0].pop("groupName"), "groupName is required"),
    (lambda rc: rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].update({"imagee": "x"}),
     "headGroupSpec.template"),
    (lambda rc: rc["spec"].pop("headGroupSpec"), "headGroupSpec is required"),
])
def test_raycluster_checks_catch_mistakes(break_it, expected):
    rc = copy.deepcopy(raycluster())
    break_it(rc)
    problems = raycluster_problems(rc, kubernetes_versions()[-1])
    assert any(expected in p for p in problems), problems


def containers(template: dict) -> list[dict]:
    return template["spec"]["containers"]


def ray_templates(rc: dict) -> list[tuple[str, dict]]:
    spec = rc["spec"]
    return [("head", spec["headGroupSpec"]["template"])] + [
        (g["groupName"], g["template"]) for g in spec["workerGroupSpecs"]]


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def test_raycluster_has_a_cpu_and_a_gpu_group_and_a_head_that_does_not_train():
    rc = raycluster()
    head = rc["spec"]["headGroupSpec"]
    assert head["rayStartParams"].get("num-cpus") == "0"
    assert head.get("serviceType", "ClusterIP") == "ClusterIP"  # never exposed outside the cluster
    assert not head.get("enableIngress", False)

    def gpus(group):
        return int(containers(group["template"])[0].get("resources", {}).get("limits", {})
                   .get("nvidia.com/gpu", 0))

    groups = rc["spec"]["workerGroupSpecs"]
    gpu_groups = [g for g in groups if gpus(g) > 0]
    cpu_groups = [g for g in groups if gpus(g) == 0]
    assert cpu_groups and gpu_groups
    for group in gpu_groups:
        assert containers(group["template"])[0]["image"].endswith(":cuda")
        tolerations = group["template"]["spec"].get("tolerations", [])
        assert any(t.get("key") == "nvidia.com/gpu" for t in tolerations)
    for group in cpu_groups:
        assert containers(group["template"])[0]["image"].endswith(":cpu")


def test_a_worker_pod_drains_its_ray_node_first_with_its_grace_period_as_the_deadline():
    """Every worker group's pods run deploy/drain-node.sh (as the image installs it) before
    they stop, told the pod's terminationGracePeriodSeconds as the drain's deadline and the
    pod's name for the drain's message; the head, which Brigade never drains, has no hook."""
    rc = raycluster()
    for group in rc["spec"]["workerGroupSpecs"]:
        spec = group["template"]["spec"]
        container = containers(group["template"])[0]
        hook = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
        assert hook == [DRAIN_HOOK], (group["groupName"], hook)
        grace = spec.get("terminationGracePeriodSeconds")
        assert isinstance(grace, int) and grace >= 30, (group["groupName"], grace)  # 30: k8s' default
        env = env_of(container)
        assert env["DRAIN_DEADLINE_S"].get("value") == str(grace), (group["groupName"], env)
        assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    head = rc["spec"]["headGroupSpec"]["template"]
    assert "lifecycle" not in containers(head)[0]
    copies = [value.split() for value in instructions("COPY")]
    assert ["deploy/drain-node.sh", DRAIN_HOOK] in copies
    assert any(DRAIN_HOOK in run and "chmod 0755" in run for run in instructions("RUN"))


def run_drain_hook(tmp_path: Path, node_id_output: str, deadline_s: str = "7", ray_code: int = 0):
    """deploy/drain-node.sh with a stub `python` (printing `node_id_output`, as the driver that
    asks the pod's Ray node its id would) and a stub `ray`: (result, the calls made, seconds)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir(exist_ok=True)
    log.unlink(missing_ok=True)
    ray = bin_dir / "ray"  # its arguments kept apart (\x1f between), as the hook quoted them
    ray.write_text(f'#!/bin/sh\n{{ printf "ray"; for a in "$@"; do printf "\\037%s" "$a"; done; echo; }}'
                   f' >> "{log}"\nexit {ray_code}\n')
    ray.chmod(0o755)
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\necho "python $*" | tr "\\n" " " >> "{log}"\necho >> "{log}"\n'
                      f'printf "%s" "{node_id_output}"\n')
    python.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "DRAIN_DEADLINE_S": deadline_s, "POD_NAME": "w-cpu-x1"}
    started = time.monotonic()
    result = subprocess.run(["sh", str(DRAIN_NODE)], env=env, capture_output=True, text=True,
                            timeout=60)
    calls = log.read_text().splitlines() if log.exists() else []
    return result, calls, time.monotonic() - started


def test_the_drain_hook_drains_its_own_node_by_id_with_the_deadline_left(tmp_path):
    node_id = "ab" * 28
    result, calls, took = run_drain_hook(tmp_path, f"a line ray.init printed\n{node_id}\n")
    assert result.returncode == 0, result.stderr
    assert calls[0].startswith("python -c") and 'ray.init(address="auto"' in calls[0]
    assert "get_runtime_context().get_node_id()" in calls[0]
    drain = calls[1].split("\x1f")
    assert drain[:2] == ["ray", "drain-node"] and "--address" not in drain  # the pod's own record
    args = dict(zip(drain[2::2], drain[3::2], strict=True))
    assert args["--node-id"] == node_id
    assert args["--reason"] == "DRAIN_NODE_REASON_PREEMPTION"
    assert args["--reason-message"] == "pod w-cpu-x1 terminating"
    assert args["--deadline-remaining-seconds"] in ("7", "6")  # the grace period, less what passed
    assert len(calls) == 2
    # then it waits while a raylet runs (this machine's, here), until 5 s before the deadline
    assert took < 7, took


@pytest.mark.parametrize("node_id_output, ray_code", [("", 0), ("ab" * 28, 1)],
                         ids=["no node answers", "ray refuses"])
def test_the_drain_hook_never_holds_the_pod_when_it_cannot_drain(tmp_path, node_id_output, ray_code):
    result, calls, took = run_drain_hook(tmp_path, node_id_output, deadline_s="60", ray_code=ray_code)
    assert result.returncode == 0, result.stderr  # a failed hook would only be logged by Kubernetes
    assert took < 20  # it returned: Kubernetes stops the pod now
    assert sum(c.startswith("ray\x1fdrain-node") for c in calls) == (1 if node_id_output else 0)
    assert "not drained" in result.stderr or "refused" in result.stderr


def secret_ref(env: dict, name: str) -> tuple[str, str] | None:
    ref = env.get(name, {}).get("valueFrom", {}).get("secretKeyRef")
    return (ref["name"], ref["key"]) if ref else None


def test_every_ray_container_and_brigade_share_one_ray_token():
    docs = kuberay_docs()
    refs = set()
    for where, template in ray_templates(raycluster()):
        for container in containers(template):
            env = env_of(container)
            assert env.get("RAY_AUTH_MODE", {}).get("value") == "token", where
            assert secret_ref(env, "RAY_AUTH_TOKEN"), f"{where}: RAY_AUTH_TOKEN from a Secret"
            refs.add(secret_ref(env, "RAY_AUTH_TOKEN"))
    brigade = env_of(containers(one(docs, "Deployment", "brigade")["spec"]["template"])[0])
    assert brigade["RAY_AUTH_MODE"]["value"] == "token"
    refs.add(secret_ref(brigade, "RAY_AUTH_TOKEN"))
    assert len(refs) == 1, f"one token for the whole cluster, found {refs}"


def test_ray_workers_get_the_object_storage_credentials_brigade_has():
    # Rank actors on the workers write checkpoint shards and read tenants' data.
    brigade = env_of(containers(one(kuberay_docs(), "Deployment", "brigade")["spec"]["template"])[0])
    wanted = {n: secret_ref(brigade, n) for n in brigade if n.startswith("AWS_")}
    assert wanted
    for where, template in ray_templates(raycluster()):
        if where != "head":
            env = env_of(containers(template)[0])
            assert {n: secret_ref(env, n) for n in wanted} == wanted, where


def test_every_secret_key_referenced_exists_and_secrets_are_marked_placeholders():
    docs = kuberay_docs()
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    templates = [t for _, t in ray_templates(raycluster())]
    templates.append(one(docs, "Deployment", "brigade")["spec"]["template"])
    used = set()
    for template in templates:
        for container in containers(template):
            for entry in container.get("env", []):
                ref = entry.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] in secrets, ref
                    assert ref["key"] in secrets[ref["name"]]["stringData"], ref
                    used.add((ref["name"], ref["key"]))
    data = secrets["brigade"]["stringData"]
    assert {k for (_, k) in used} == set(data), "a key nobody reads, or one read that is missing"
    for key in ("ray-auth-token", "admin-key", "secret", "database-url",
                "aws-access-key-id", "aws-secret-access-key"):
        assert "CHANGE_ME" in data[key], f"{key}: a clearly marked placeholder"


def test_brigade_deployment_is_two_replicas_rolled_one_at_a_time_pointing_at_the_head():
    docs = kuberay_docs()
    rc = raycluster()
    deployment = one(docs, "Deployment", "brigade")
    # Two replicas, one leading (the lease in the database); an upgrade starts a
    # new one beside the old ones and never takes one away before it is ready.
    assert deployment["spec"]["replicas"] == 2
    strategy = deployment["spec"]["strategy"]
    assert strategy["type"] == "RollingUpdate"
    assert strategy["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    container = containers(deployment["spec"]["template"])[0]
    env = env_of(container)
    assert float(env["BRIGADE_LEASE_S"]["value"]) > 0
    # each replica named by its pod (in /readyz, events and audit rows)
    assert env["BRIGADE_REPLICA_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # replicas share the job store, so it is Postgres, from the secret
    assert secret_ref(env, "BRIGADE_DATABASE_URL") == ("brigade", "database-url")
    assert "postgresql" in one(docs, "Secret", "brigade")["stringData"]["database-url"]
    # a follower is ready (it serves the API): readiness is /readyz, which both roles pass
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    spread = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    terms = spread["preferredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    host, port = env["BRIGADE_RAY_ADDRESS"]["value"].rsplit(":", 1)
    head_port = rc["spec"]["headGroupSpec"]["rayStartParams"].get("port", "6379")
    assert host.split(".")[0] == f"{rc['metadata']['name']}-head-svc"  # KubeRay's name for it
    assert port == head_port
    assert env["BRIGADE_ENVIRONMENT"]["value"] == "production"
    http = [p for p in container["ports"] if p.get("name") == "http"]
    assert http and str(http[0]["containerPort"]) == env["BRIGADE_PORT"]["value"]
    assert env["BRIGADE_HOST"]["value"] == "0.0.0.0"
    routes = "".join(p.read_text() for p in (ROOT / "api" / "server" / "routes").glob("*.py"))
    for probe in ("readinessProbe", "livenessProbe"):
        path = container[probe]["httpGet"]["path"]
        assert f'.get("{path}"' in routes, f"{probe}: no route {path} in api/server/routes"
    security = deployment["spec"]["template"]["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True


def test_a_disruption_budget_keeps_one_brigade_replica_up():
    docs = kuberay_docs()
    budget = one(docs, "PodDisruptionBudget", "brigade")
    deployment = one(docs, "Deployment", "brigade")
    assert budget["apiVersion"] == "policy/v1"
    assert budget["spec"] == {"minAvailable": 1, "selector": budget["spec"]["selector"]}
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(budget["spec"]["selector"], labels)  # it covers Brigade's pods
    ray_labels = [t.get("metadata", {}).get("labels", {}) for _, t in ray_templates(raycluster())]
    assert not any(selects(budget["spec"]["selector"], lb) for lb in ray_labels)  # and only them
    assert budget["spec"]["minAvailable"] < deployment["spec"]["replicas"]  # a drain can proceed


def test_brigade_service_exposes_only_the_api_port():
    docs = kuberay_docs()
    service = one(docs, "Service", "brigade")
    deployment = one(docs, "Deployment", "brigade")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"].get("type", "ClusterIP") == "ClusterIP"
    assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())
    container = containers(deployment["spec"]["template"])[0]
    targets = {p["targetPort"] for p in service["spec"]["ports"]}
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert {named.get(t, t) for t in targets} == {8000}


def settings_from(env: dict[str, str], monkeypatch) -> Settings:
    for name in list(os.environ):
        if name.startswith("BRIGADE_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings()


def test_the_deployment_environment_makes_a_production_settings(monkeypatch, tmp_path):
    docs = kuberay_docs()
    data = one(docs, "Secret", "brigade")["stringData"]
    env = {}
    for entry in containers(one(docs, "Deployment", "brigade")["spec"]["template"])[0]["env"]:
        ref = entry.get("valueFrom", {}).get("secretKeyRef")
        if entry.get("valueFrom", {}).get("fieldRef"):  # the pod's own name, as Kubernetes gives it
            env[entry["name"]] = "brigade-6f9c8d7b5-x2x9q"
            continue
        env[entry["name"]] = data[ref["key"]] if ref else entry["value"]
    env["BRIGADE_DATA_DIR"] = str(tmp_path)
    settings = settings_from({k: v for k, v in env.items() if k.startswith("BRIGADE_")}, monkeypatch)
    assert settings.environment == "production"
    assert settings.secret and settings.admin_key and settings.ray_address
    assert settings.resolved_database_url.startswith("postgresql+psycopg://")
    assert settings.resolved_storage_uri.startswith("s3://")
    assert isinstance(settings.storage_options, dict)


def test_kustomization_lists_every_manifest_and_renders():
    kustomization = yaml.safe_load((KUBERAY / "kustomization.yaml").read_text())
    manifests = {p.name for p in KUBERAY.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests
    kubectl = shutil.which("kubectl")
    if kubectl is None:  # CI installs one (.ci/run): there it fails instead
        skip_or_fail("no kubectl here to render the kustomization (the file list was checked)")
    out = subprocess.run([kubectl, "kustomize", str(KUBERAY)], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    rendered = [d for d in yaml.safe_load_all(out) if d]
    assert len(rendered) == len(kuberay_docs())
    for doc in rendered:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == kustomization["namespace"], doc["metadata"]


# -- NetworkPolicy, evaluated ------------------------------------------------------


class Pod:
    def __init__(self, name, namespace, labels, ports=None, ip=None):
        self.name, self.namespace, self.labels = name, namespace, labels
        self.ports = ports or {}  # port name -> number
        self.ip = ip


def selects(selector: dict | None, labels: dict) -> bool:
    if selector is None:
        return False
    supported = {"matchLabels", "matchExpressions"}
    assert not set(selector) - supported, f"unsupported selector {selector}"
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        ok = {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def peer_allows(peer: dict, policy_ns: str, source, namespaces: dict[str, dict]) -> bool:
    assert not set(peer) - {"podSelector", "namespaceSelector", "ipBlock"}, peer
    if "ipBlock" in peer:
        ip = source.ip if isinstance(source, Pod) else source
        if ip is None:
            return False
        block = peer["ipBlock"]
        address = ipaddress.ip_address(ip)
        return address in ipaddress.ip_network(block["cidr"]) and not any(
            address in ipaddress.ip_network(e) for e in block.get("except", []))
    if not isinstance(source, Pod):
        return False  # an address outside the cluster matches no pod or namespace selector
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], namespaces.get(source.namespace, {})):
            return False
    elif source.namespace != policy_ns:
        return False
    return "podSelector" not in peer or selects(peer["podSelector"], source.labels)


def port_allows(rule_ports: list[dict] | None, target: Pod, port: int) -> bool:
    if not rule_ports:
        return True
    for entry in rule_ports:
        assert not set(entry) - {"port", "protocol", "endPort"}, entry
        if entry.get("protocol", "TCP") != "TCP":
            continue
        wanted = entry.get("port")
        if wanted is None:
            return True
        if isinstance(wanted, str):
            wanted = target.ports.get(wanted)
            if wanted is None:
                continue
        if wanted <= port <= entry.get("endPort", wanted):
            return True
    return False


def allowed(policies: list[dict], source, target: Pod, port: int, namespaces: dict) -> bool:
    """Kubernetes NetworkPolicy ingress semantics, for TCP."""
    selecting = [p for p in policies
                 if p["metadata"].get("namespace", target.namespace) == target.namespace
                 and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
                 and selects(p["spec"]["podSelector"], target.labels)]
    if not selecting:
        return True  # not isolated
    for policy in selecting:
        ns = policy["metadata"].get("namespace", target.namespace)
        for rule in policy["spec"].get("ingress", []):
            peers = rule.get("from")
            from_ok = not peers or any(peer_allows(p, ns, source, namespaces) for p in peers)
            if from_ok and port_allows(rule.get("ports"), target, port):
                return True
    return False


def cluster_pods() -> tuple[dict[str, Pod], dict[str, dict]]:
    docs = kuberay_docs()
    ns = "brigade"
    rc = raycluster()
    name = rc["metadata"]["name"]
    deployment = one(docs, "Deployment", "brigade")
    pods = {
        "brigade": Pod("brigade", ns, deployment["spec"]["template"]["metadata"]["labels"],
                       {p["name"]: p["containerPort"] for p in containers(deployment["spec"]["template"])[0]["ports"]}),
    }
    for group, template in ray_templates(rc):
        # KubeRay adds these labels to every pod it makes for a RayCluster.
        labels = dict(template.get("metadata", {}).get("labels", {}))
        labels.update({"ray.io/cluster": name, "ray.io/node-type": "head" if group == "head" else "worker",
                       "ray.io/group": "headgroup" if group == "head" else group})
        ports = {p["name"]: p["containerPort"] for c in containers(template) for p in c.get("ports", [])}
        pods[f"ray-{group}"] = Pod(f"ray-{group}", ns, labels, ports)
    pods["tenant-pod"] = Pod("tenant-pod", "tenant-a", {"app": "training-client"}, ip="10.8.0.9")
    pods["stray-pod"] = Pod("stray-pod", ns, {"app": "debug"}, ip="10.8.0.10")
    namespaces = {ns: {"kubernetes.io/metadata.name": ns},
                  "tenant-a": {"kubernetes.io/metadata.name": "tenant-a"}}
    return pods, namespaces


def network_policies() -> list[dict]:
    return [d for d in kuberay_docs() if d["kind"] == "NetworkPolicy"]


TENANTS = ["tenant-pod", "stray-pod", "203.0.113.7"]


def test_tenants_reach_brigades_api_and_never_a_ray_port():
    policies = network_policies()
    pods, namespaces = cluster_pods()
    ray_pods = [p for name, p in pods.items() if name.startswith("ray-")]
    assert len(ray_pods) >= 3
    for tenant in TENANTS:
        source = pods.get(tenant, tenant)
        assert allowed(policies, source, pods["brigade"], 8000, namespaces), tenant
        for port in RAY_PORTS | {12345, 20000}:  # Ray's fixed ports and some worker ports
            assert not allowed(policies, source, pods["brigade"], port, namespaces), (tenant, port)
            for pod in ray_pods:
                assert not allowed(policies, source, pod, port, namespaces), (tenant, pod.name, port)


def test_ray_nodes_and_brigade_reach_each_other():
    policies = network_policies()
    pods, namespaces = cluster_pods()
    ray_pods = [p for name, p in pods.items() if name.startswith("ray-")]
    for a in ray_pods + [pods["brigade"]]:
        for b in ray_pods + [pods["brigade"]]:
            if a is not b:
                for port in (6379, 8076, 12345):
                    assert allowed(policies, a, b, port, namespaces), (a.name, b.name, port)


def test_the_policy_evaluator_is_not_vacuous():
    pods, namespaces = cluster_pods()
    head = pods["ray-head"]
    # Without the policies, everything is open: the tests above would fail.
    assert allowed([], pods["tenant-pod"], head, 6379, namespaces)
    only_api = [p for p in network_policies() if p["metadata"]["name"] == "brigade-api"]
    assert allowed(only_api, pods["tenant-pod"], head, 6379, namespaces)
    assert not allowed(only_api, pods["tenant-pod"], pods["brigade"], 6379, namespaces)


# -- compose -----------------------------------------------------------------------

_INTERPOLATION = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def interpolate(value, env: dict[str, str]):
    """Compose's variable interpolation, over a whole parsed file."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one_var(m):
        if m.group(1):
            return "$"
        name = m.group(2) or m.group(5)
        op, arg = m.group(3), m.group(4)
        current = env.get(name)
        unset = current is None or (op is not None and op.startswith(":") and current == "")
        if op in (":-", "-"):
            return arg if unset else current
        if op in (":?", "?"):
            if unset:
                raise KeyError(f"{name}: {arg}")
            return current
        return current or ""

    return _INTERPOLATION.sub(one_var, value)


def variables(value, required_only=False) -> set[str]:
    text = json.dumps(value)
    found = set()
    for m in _INTERPOLATION.finditer(text):
        name = m.group(2) or m.group(5)
        if name and (not required_only or (m.group(3) or "").endswith("?")):
            found.add(name)
    return found


def generated_env(tmp_path: Path) -> dict[str, str]:
    out = tmp_path / "gen.env"
    subprocess.run(["sh", str(GEN_ENV), str(out)], check=True, capture_output=True, timeout=30)
    env = {}
    for line in out.read_text().splitlines():
        name, _, value = line.partition("=")
        env[name] = value
    return env


def compose_schema() -> dict:
    ref = importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    return json.loads(ref.read_text())


def test_compose_matches_the_compose_specification(tmp_path):
    schema = compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    resolved = interpolate(compose(), generated_env(tmp_path))
    errors = sorted(validator.iter_errors(resolved), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    broken = copy.deepcopy(resolved)
    broken["services"]["brigade"]["depends_on"]["postgres"]["condition"] = "service_ready"
    assert not validator.is_valid(broken)  # the schema is really checking
    broken = copy.deepcopy(resolved)
    broken["services"]["brigade"]["enviroment"] = broken["services"]["brigade"].pop("environment")
    assert not validator.is_valid(broken)


def test_gen_env_writes_exactly_what_compose_requires(tmp_path):
    env = generated_env(tmp_path)
    required = variables(compose(), required_only=True)
    assert set(env) == required
    for name, value in env.items():
        assert re.fullmatch(r"[0-9a-f]{64}", value), name  # URL-safe: it goes into a database URL
    other = tmp_path / "other"
    other.mkdir()
    assert generated_env(other) != env  # fresh secrets every time
    out = tmp_path / "gen.env"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    before = out.read_text()
    again = subprocess.run(["sh", str(GEN_ENV), str(out)], capture_output=True, timeout=30)
    assert again.returncode != 0 and out.read_text() == before  # never overwritten
    with pytest.raises(KeyError):
        interpolate(compose(), {})


def ray_command(service: dict) -> list[str] | None:
    command = service.get("command")
    if command is None:
        return None
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    return argv if argv[:2] == ["ray", "start"] else None


def flag(argv: list[str], name: str) -> str | None:
    for arg in argv:
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


def resolved_compose(tmp_path) -> dict:
    return interpolate(compose(), generated_env(tmp_path))


def test_compose_ray_nodes_share_one_token_and_join_the_head(tmp_path):
    raw = compose()["services"]
    services = resolved_compose(tmp_path)["services"]
    ray_nodes = {name: ray_command(s) for name, s in services.items() if ray_command(s)}
    heads = [n for n, argv in ray_nodes.items() if "--head" in argv]
    assert len(heads) == 1
    head = heads[0]
    head_port = flag(ray_nodes[head], "port") or "6379"
    assert flag(ray_nodes[head], "num-cpus") == "0"
    workers = [n for n in ray_nodes if n != head and "gpu" not in raw[n].get("profiles", [])]
    assert len(workers) >= 2
    for name, argv in ray_nodes.items():
        if name != head:
            assert flag(argv, "address") == f"{head}:{head_port}", name
            assert raw[name]["depends_on"][head]["condition"] == "service_healthy"
    brigade = services["brigade"]
    token_users = list(ray_nodes) + ["brigade"]
    tokens = {services[n]["environment"]["RAY_AUTH_TOKEN"] for n in token_users}
    assert len(tokens) == 1 and len(tokens.pop()) >= 32
    for name in token_users:
        assert services[name]["environment"]["RAY_AUTH_MODE"] == "token", name
    assert brigade["environment"]["BRIGADE_RAY_ADDRESS"] == f"{head}:{head_port}"
    # One image everywhere: Ray needs the same Ray and Python versions on every node.
    images = {(raw[n].get("image"), json.dumps(raw[n].get("build"), sort_keys=True)) for n in token_users}
    assert len(images) == 1


def test_compose_image_tag_follows_the_variant(tmp_path):
    env = generated_env(tmp_path)
    for variant in ("cpu", "cuda"):
        services = interpolate(compose(), {**env, "VARIANT": variant})["services"]
        built = [s for s in services.values() if "build" in s]
        assert len(built) >= 4
        for service in built:
            assert service["image"] == f"brigade:{variant}"
            assert service["build"]["args"]["VARIANT"] == variant
    assert interpolate(compose(), env)["services"]["brigade"]["image"] == "brigade:cpu"


def published_ports(service: dict) -> list[str]:
    out = []
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            if entry.get("published") is not None:
                out.append(str(entry["target"]))
        else:
            parts = str(entry).split(":")
            if len(parts) >= 2:
                out.append(parts[-1].split("/")[0])
            else:
                out.append(parts[0])  # "8000" alone publishes on a random host port
    return out


def test_compose_publishes_only_brigades_api(tmp_path):
    services = resolved_compose(tmp_path)["services"]
    for name, service in services.items():
        assert service.get("network_mode") != "host", name
        assert not service.get("expose"), name
        if name != "brigade":
            assert published_ports(service) == [], f"{name} publishes {service.get('ports')}"
    port = services["brigade"]["environment"]["BRIGADE_PORT"]
    assert published_ports(services["brigade"]) == [port]
    assert services["brigade"]["ports"][0].startswith("127.0.0.1:")  # loopback unless asked
    assert published_ports({"ports": ["6379:6379"]}) == ["6379"]
    assert published_ports({"ports": [{"target": 6379, "published": 16379}]}) == ["6379"]


def test_compose_dependencies_exist_and_brigade_waits_for_its_backends(tmp_path):
    services = resolved_compose(tmp_path)["services"]
    for name, service in services.items():
        deps = service.get("depends_on", [])
        for dep in deps:
            assert dep in services, f"{name} depends on unknown {dep}"
    deps = services["brigade"]["depends_on"]
    assert deps["postgres"]["condition"] == "service_healthy"
    assert deps["create-bucket"]["condition"] == "service_completed_successfully"
    for name in ("postgres", "ray-head"):
        assert "healthcheck" in services[name], name


def test_compose_brigade_environment_makes_a_production_settings(tmp_path, monkeypatch):
    services = resolved_compose(tmp_path)["services"]
    env = {k: str(v) for k, v in services["brigade"]["environment"].items()}
    brigade_env = {k: v for k, v in env.items() if k.startswith("BRIGADE_")}
    brigade_env["BRIGADE_DATA_DIR"] = str(tmp_path / "data")
    settings = settings_from(brigade_env, monkeypatch)
    assert settings.environment == "production"
    # The database URL names the compose Postgres with the user, password and database it creates.
    from sqlalchemy.engine import make_url

    url = make_url(settings.resolved_database_url)
    postgres = services["postgres"]["environment"]
    assert url.drivername == "postgresql+psycopg"
    assert (url.host, url.username, url.password, url.database) == (
        "postgres", postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"], postgres["POSTGRES_DB"])
    assert url.host in services
    # The driver the URL names is a dependency of the project.
    deps = {Requirement(r).name for r in SERVER_REQUIREMENTS}
    assert "psycopg" in deps
    # Checkpoints and data go to the compose S3 store, to the bucket the one-shot job makes.
    bucket = settings.resolved_storage_uri.removeprefix("s3://").split("/")[0]
    assert settings.resolved_data_uri_root.startswith(f"s3://{bucket}/")
    assert f'"{bucket}"' in "".join(services["create-bucket"]["command"])
    endpoint = settings.storage_options["client_kwargs"]["endpoint_url"]
    assert endpoint == env["AWS_ENDPOINT_URL"]
    host = endpoint.split("//")[1].split(":")[0]
    assert host in services or host in {s.get("hostname") for s in services.values()}
    for name, service in services.items():
        if ray_command(service):
            assert service["environment"]["AWS_ENDPOINT_URL"] == endpoint, name  # ranks write shards


# -- BRIGADE_* names -------------------------------------------------------------


def brigade_names_in_deploy() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    files = [p for p in DEPLOY.rglob("*") if p.is_file() and p.name != ".env"] + [DOCS]
    for path in files:
        for name in BRIGADE_NAME.findall(path.read_text()):
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_brigade_variable_is_a_settings_field():
    names = brigade_names_in_deploy()
    assert {"BRIGADE_RAY_ADDRESS", "BRIGADE_DATABASE_URL", "BRIGADE_STORAGE_URI",
            "BRIGADE_STORAGE_OPTIONS", "BRIGADE_SECRET", "BRIGADE_ADMIN_KEY"} <= set(names)
    unknown = {n: sorted(f) for n, f in names.items() if n not in SETTINGS_ENV | CLIENT_ENV}
    assert not unknown, f"not a field of service.settings.Settings: {unknown}"


def test_client_variables_are_what_the_cli_reads():
    source = (ROOT / "api" / "cli" / "remote.py").read_text()
    for name in CLIENT_ENV:
        assert f'envvar="{name}"' in source, name


def test_the_settings_field_check_would_catch_drift():
    assert "BRIGADE_RAY_ADDRESS" in SETTINGS_ENV
    assert "BRIGADE_RAY_ADRESS" not in SETTINGS_ENV | CLIENT_ENV
    assert BRIGADE_NAME.findall("env BRIGADE_RAY_ADRESS=x") == ["BRIGADE_RAY_ADRESS"]


# -- the Dockerfile ----------------------------------------------------------------


def dockerfile() -> DockerfileParser:
    return DockerfileParser(path=str(DOCKERFILE))


def instructions(name: str) -> list[str]:
    return [s["value"] for s in dockerfile().structure if s["instruction"] == name]


def test_dockerfile_has_the_variant_argument_and_pins():
    parser = dockerfile()
    args = parser.args
    assert args["VARIANT"] == "cpu"
    # The torch that CI and the Makefile install, and the Ray the RayCluster declares.
    make_torch = re.search(r"torch==([0-9.]+)", (ROOT / "Makefile").read_text()).group(1)
    assert args["TORCH_VERSION"] == make_torch
    ray = Version(args["RAY_VERSION"])
    assert ray >= RAY_TOKEN_AUTH_SINCE
    ray_req = next(Requirement(r) for r in SERVER_REQUIREMENTS if Requirement(r).name == "ray")
    assert ray_req.specifier.contains(ray)
    assert raycluster()["spec"]["rayVersion"] == args["RAY_VERSION"]
    python = re.search(r"PYTHON_VERSION=([0-9.]+)", DOCKERFILE.read_text()).group(1)
    assert SpecifierSet(PYPROJECT["project"]["requires-python"]).contains(python + ".0")
    assert parser.baseimage.startswith(f"python:{python}")


def test_dockerfile_copies_every_package_and_installs_the_project():
    copied = set()
    for value in instructions("COPY"):
        copied |= set(value.split()[:-1])
    packages = PYPROJECT["tool"]["setuptools"]["packages"]  # a list, or find's include patterns
    names = packages["find"]["include"] if isinstance(packages, dict) else packages
    top = {p.split(".")[0].rstrip("*") for p in names}
    assert top, "no package found in pyproject.toml"
    assert top <= copied, f"packages not copied into the image: {top - copied}"
    assert {"pyproject.toml", PYPROJECT["project"]["readme"]} <= copied
    assert any(re.search(r"pip install \"?\.(\[[a-z0-9,]+\])?\"?", run) for run in instructions("RUN"))
    for path in copied:
        assert (ROOT / path).exists(), path


def test_dockerfile_runs_brigade_serve_as_a_non_root_user():
    parser = dockerfile()
    entrypoint = json.loads(instructions("ENTRYPOINT")[-1])
    assert entrypoint[-1] == "brigade-entrypoint"
    assert any(v.split()[0] == "deploy/entrypoint.sh" and v.split()[-1].endswith("/brigade-entrypoint")
               for v in instructions("COPY"))
    assert json.loads(instructions("CMD")[-1]) == ["serve"]
    user = instructions("USER")[-1].split(":")[0]
    assert user.isdigit() and int(user) != 0  # numeric: runAsNonRoot can verify it
    envs = parser.envs
    assert envs["RAY_AUTH_MODE"] == "token"
    assert instructions("EXPOSE")[-1] == envs["BRIGADE_PORT"]
    assert envs["BRIGADE_HOST"] == "0.0.0.0"
    assert {n for n in envs if n.startswith("BRIGADE_")} <= SETTINGS_ENV


def linter(name: str) -> str:
    """A linter binary from the dev extra (its wheel ships the binary)."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip(f"no {name} binary here (pip install the dev extra)")
    return found


def test_dockerfile_passes_hadolint():
    # hadolint also runs shellcheck over every RUN; the file's own ignores say why.
    result = subprocess.run([linter("hadolint"), "--no-color", str(DOCKERFILE)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_is_really_linting(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:3.11-slim\nUSER root\nRUN cd /tmp && rm -rf *\n")
    result = subprocess.run([linter("hadolint"), "--no-color", str(bad)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "DL3002" in result.stdout  # last USER is root


@pytest.mark.parametrize("script", [ENTRYPOINT, GEN_ENV, DRAIN_NODE], ids=lambda p: p.name)
def test_shell_scripts_pass_shellcheck(script):
    result = subprocess.run([linter("shellcheck"), "--shell=sh", str(script)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert os.access(script, os.X_OK), f"{script} must be executable"


def stub(bin_dir: Path, name: str, log: Path, code: int = 0) -> None:
    script = bin_dir / name
    script.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexit {code}\n')
    script.chmod(0o755)


def torch_install_step() -> str:
    runs = [r for r in instructions("RUN") if 'case "$VARIANT"' in r]
    assert len(runs) == 1
    return runs[0]


@pytest.mark.parametrize("variant, index, code", [
    ("cpu", "https://download.pytorch.org/whl/cpu", 0),
    ("cuda", "https://pypi.org/simple", 0),
    ("rocm", None, 2),
])
def test_dockerfile_variant_picks_the_torch_build(tmp_path, variant, index, code):
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    stub(bin_dir, "pip", log)
    stub(bin_dir, "python", log)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "VARIANT": variant,
           "TORCH_VERSION": dockerfile().args["TORCH_VERSION"], "TORCH_INDEX_URL": ""}
    result = subprocess.run(["sh", "-c", torch_install_step()], env=env, capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == code, result.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    if index is None:
        assert calls == []
    else:
        assert calls[0] == f"pip install --index-url {index} torch=={env['TORCH_VERSION']}"
        assert calls[1].startswith("python -c")  # the check that the build matches the variant
        assert f"== ('{variant}' == 'cpu')" in calls[1]


# -- the entrypoint ----------------------------------------------------------------


def run_entrypoint(tmp_path: Path, args: list[str], env: dict[str, str], ray_code: int = 0):
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir(exist_ok=True)
    log.unlink(missing_ok=True)
    stub(bin_dir, "ray", log, ray_code)
    stub(bin_dir, "brigade", log)
    stub(bin_dir, "python", log)
    full = {"PATH": f"{bin_dir}:/usr/bin:/bin", **env}
    result = subprocess.run(["sh", str(ENTRYPOINT), *args], env=full, capture_output=True,
                            text=True, timeout=30)
    calls = log.read_text().splitlines() if log.exists() else []
    return result, calls


def test_entrypoint_joins_the_cluster_without_resources_then_serves(tmp_path):
    result, calls = run_entrypoint(tmp_path, ["serve", "--port", "9000"],
                                   {"BRIGADE_RAY_ADDRESS": "ray-head:6379", "RAY_AUTH_MODE": "token"})
    assert result.returncode == 0, result.stderr
    assert calls == [("ray start --address=ray-head:6379 --num-cpus=0 --num-gpus=0"
                      " --object-store-memory=268435456 --disable-usage-stats"),
                     "brigade serve --port 9000"]


def test_entrypoint_defaults_to_serve_and_skips_joining_for_ray_client_or_local(tmp_path):
    for env in ({}, {"BRIGADE_RAY_ADDRESS": "ray://head:10001"}):
        result, calls = run_entrypoint(tmp_path, [], env)
        assert result.returncode == 0, result.stderr
        assert calls == ["brigade serve"]


def test_entrypoint_runs_other_commands(tmp_path):
    result, calls = run_entrypoint(tmp_path, ["ray", "start", "--head", "--block"], {})
    assert result.returncode == 0
    assert calls == ["ray start --head --block"]


def test_entrypoint_stops_when_joining_fails(tmp_path):
    result, calls = run_entrypoint(tmp_path, ["serve"], {"BRIGADE_RAY_ADDRESS": "ray-head:6379",
                                                         "RAY_AUTH_MODE": "token"}, ray_code=1)
    assert result.returncode != 0
    assert not any(c.startswith("brigade") for c in calls)


def test_entrypoint_refuses_ray_without_token_auth(tmp_path):
    result, calls = run_entrypoint(tmp_path, ["serve"], {"BRIGADE_RAY_ADDRESS": "ray-head:6379",
                                                         "RAY_AUTH_MODE": "disabled"})
    assert result.returncode == 64 and calls == []


def test_entrypoint_refuses_each_placeholder_of_the_secret(tmp_path):
    docs = kuberay_docs()
    data = one(docs, "Secret", "brigade")["stringData"]
    fed = 0
    for entry in containers(one(docs, "Deployment", "brigade")["spec"]["template"])[0]["env"]:
        ref = entry.get("valueFrom", {}).get("secretKeyRef")
        if ref and "CHANGE_ME" in data[ref["key"]]:
            fed += 1
            result, calls = run_entrypoint(tmp_path, ["serve"], {entry["name"]: data[ref["key"]]})
            assert result.returncode == 64, entry["name"]
            assert entry["name"] in result.stderr and calls == []
    assert fed >= 6
