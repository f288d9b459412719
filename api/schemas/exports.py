"""A job's Hugging Face exports (`api.server.routes.exports`): what to
export, the export started, and a committed one with its files."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from api.schemas.base import Public, Request


class ExportCreate(Request):
    """`POST /v1/jobs/{id}/exports`: a committed step (unset: the latest) in a dtype, as a
    `kind` of export: "model" (a job that trains every weight), "adapter" (a PEFT adapter
    directory) or "merged" (the base with the adapters merged in); unset: "adapter" for a
    job with an `adapter` section, else "model"."""

    step: Annotated[int, Field(ge=0, le=999_999_999)] | None = None
    dtype: Literal["bfloat16", "float32"] = "float32"
    kind: Literal["model", "adapter", "merged"] | None = None


class ExportFile(Public):
    size: int
    sha256: str


class ExportPublic(Public):
    """A committed export: a Hugging Face model directory (its files, with sizes and sha256)."""

    id: str
    step: int
    dtype: str
    kind: str  # "model", "adapter" (PEFT's files) or "merged"
    bytes: int
    files: dict[str, ExportFile]
    created_at: datetime | None = None
    uri: str


class ExportStartedPublic(Public):
    id: str
    step: int
    dtype: str
    kind: str
    state: str  # "writing", or "committed" (it was there already)
