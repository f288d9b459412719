"""The fsspec options token data is read with where none are passed: JSON in
BRIGADE_DATA_STORAGE_OPTIONS of the reading process (a rank, the API at
submit), e.g. `{"client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}`
for an S3-compatible store; unset, the scheme's defaults (AWS_* variables).
Credentials never travel in a job's spec."""

from __future__ import annotations

import json
import os

ENV = "BRIGADE_DATA_STORAGE_OPTIONS"


def data_storage_options(given: dict | None = None) -> dict:
    if given is not None:
        return given
    raw = os.environ.get(ENV)
    if not raw:
        return {}
    try:
        options = json.loads(raw)
    except ValueError as e:
        raise ValueError(f"{ENV} is not JSON: {e}") from None
    if not isinstance(options, dict):
        raise ValueError(f"{ENV} must be a JSON object")
    return options
