"""Relative uris in a spec, read under the tenant's data prefix: a job may
say `data: {source: tokens, uri: datasets/corpus}` or `init: {uri: models/tiny}`
and mean `{prefix}datasets/corpus`, so one YAML file runs for every tenant
(docs/examples/). The spec is stored with the full uris, as if written so:
the engine and every later check see only those. Pure: no I/O."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from service.intake.data_access import under_prefix
from workers.schema import JobSpec


def named_uris(spec: JobSpec) -> dict[str, str]:
    """Every uri the spec names, by its dotted field (list items by index)."""
    named: dict[str, str] = {}
    if spec.model.config_uri is not None:
        named["model.config_uri"] = spec.model.config_uri
    named.update(spec.data.uris())
    if spec.eval is not None and spec.eval.uri is not None:
        named["eval.uri"] = spec.eval.uri
    if spec.init is not None:
        for name in ("uri", "adapter_uri"):
            if (value := getattr(spec.init, name, None)) is not None:
                named[f"init.{name}"] = value
    if spec.prepare is not None:
        named.update(spec.prepare.uris())
    return named


def resolve_relative(spec: JobSpec, tenant: str, root: str) -> JobSpec:
    """`spec` with each relative uri joined to the tenant's data prefix."""
    for field, uri in named_uris(spec).items():
        full = under_prefix(uri, tenant, root)
        if full != uri:
            spec = _replaced(spec, field.split("."), full)
    return spec


def _replaced(node: Any, path: list[str], value: str) -> Any:
    """`node` (a model or a list) with the value at the dotted `path` replaced,
    every model on the way copied (nothing validated again: only a uri changes)."""
    head, rest = path[0], path[1:]
    if isinstance(node, list):
        index = int(head)
        items = list(node)
        items[index] = value if not rest else _replaced(items[index], rest, value)
        return items
    assert isinstance(node, BaseModel), node
    child = value if not rest else _replaced(getattr(node, head), rest, value)
    return node.model_copy(update={head: child})
