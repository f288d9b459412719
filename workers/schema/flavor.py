"""Resource flavors as the job and the API name them: a flavor's name (a
short slug: `resources_per_worker.flavor`, `PUT /v1/flavors/{name}`), and
the Ray node labels a flavor is made of (`ray start --labels k=v`, KubeRay's
`rayStartParams`): the syntax Ray 2.60 holds a label to (Kubernetes' own:
`ray/_private/label_utils.py`), written once here, torch- and Ray-free, so
that the API refuses what Ray would and the store never keeps it.

A flavor's labels are exact `key: value` matches (no `in(...)`, no `!`):
a node is of the flavor when every one of them is among the node's labels."""

from __future__ import annotations

import re
from collections.abc import Mapping

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
# a key: an optional DNS-subdomain prefix and '/', then a name of at most 63 characters
LABEL_KEY = re.compile(rf"^(?:{_NAME}(?:\.{_NAME})*/)?{_NAME}$")
LABEL_VALUE = re.compile(rf"^{_NAME}$")
MAX_PREFIX = 253
FLAVOR_NAME_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$"  # 1-32: a short slug
FLAVOR_NAME = re.compile(FLAVOR_NAME_PATTERN)
MAX_LABELS = 8  # a flavor is a few labels, never a node's whole table


def label_problem(key: object, value: object) -> str | None:
    """Why `key: value` is no label Ray would take on a node, or None."""
    if not isinstance(key, str) or not LABEL_KEY.fullmatch(key) or (
            "/" in key and len(key.rsplit("/", 1)[0]) > MAX_PREFIX):
        return (f"label key {str(key)[:80]!r} is not a Ray label key: an optional DNS prefix and "
                "'/', then 1-63 letters, digits, '-', '_' or '.', starting and ending with a "
                "letter or digit")
    if not isinstance(value, str) or not LABEL_VALUE.fullmatch(value):
        return (f"label {key}'s value {str(value)[:80]!r} is not a Ray label value: 1-63 "
                "letters, digits, '-', '_' or '.', starting and ending with a letter or digit")
    return None


def labels_problem(labels: Mapping[str, str]) -> str | None:
    """Why these labels are no flavor's, or None: at least one, at most
    MAX_LABELS, each a valid Ray label."""
    if not labels:
        return "a flavor needs at least one label"
    if len(labels) > MAX_LABELS:
        return f"a flavor has at most {MAX_LABELS} labels, not {len(labels)}"
    for key, value in labels.items():
        if (why := label_problem(key, value)) is not None:
            return why
    return None


def matches(labels: Mapping[str, str], node_labels: Mapping[str, str]) -> bool:
    """Whether a node with `node_labels` is of the flavor of `labels`."""
    return bool(labels) and all(node_labels.get(k) == v for k, v in labels.items())


def flavor_of_node(flavors: Mapping[str, Mapping[str, str]],
                   node_labels: Mapping[str, str]) -> str | None:
    """The flavor (name -> labels) a node with `node_labels` is of: the one
    whose labels all match it, the one with the most labels where several
    do (then the first by name); None where none does."""
    matching = [(-len(labels), name) for name, labels in flavors.items()
                if matches(labels, node_labels)]
    return min(matching)[1] if matching else None
