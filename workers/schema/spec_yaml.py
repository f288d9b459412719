"""A spec written as YAML, read as a person means it: `1e-08` is a number.

PyYAML reads YAML 1.1, where a float needs a dot (`1.0e-8`) and `1e-08` is
the string "1e-08"; YAML 1.2 and JSON read it as a number. The API's types
are strict (a string is no number), so every place that reads a spec file
(`brigade submit`, `brigade train`, the dashboard's submit form) reads it here.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


class _SpecLoader(yaml.SafeLoader):
    """SafeLoader, with YAML 1.2's floats without a dot (`1e-08`, `3E5`)."""


_SpecLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789."))


def load_spec_yaml(text: str) -> Any:
    """The YAML (or JSON) document `text`, its exponent floats as numbers."""
    return yaml.load(text, Loader=_SpecLoader)  # noqa: S506 - a SafeLoader
