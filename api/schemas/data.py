"""Files under the caller's data prefix (`api.server.routes.data`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from api.schemas.base import Public


class DataFilePublic(Public):
    """A file under the caller's data prefix (`PUT`/`GET /v1/data/{path}`, `GET /v1/data`)."""

    path: str  # relative to the prefix
    uri: str  # what a spec's `data.uri` (or a dataset's input) names
    bytes: int
    sha256: str | None = None  # an upload's, as the server received it (where known)
    replaced: bool = False  # the upload replaced a file of that path
    modified: datetime | None = None  # when it was last written, where the storage says


class DataFilesPublic(BaseModel):
    """A page of the caller's files under a part of its prefix, by path."""

    items: list[DataFilePublic]
    total: int
    limit: int
    offset: int
