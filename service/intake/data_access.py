"""Which data a tenant may name: a `data.uri` only under its own data prefix,
`{data_uri_root}/tenants/{tenant}/data/`, which the service derives (the
admin's is `tenants/admin/data/`, like any tenant's). Pure: no I/O.

Refused, with a `SpecError` at `data.uri` (the API's 422):
control characters, backslashes, chained fsspec URLs (`a::b`), queries and
fragments, `.`/`..`/empty path segments (also percent-encoded, in any case,
and encoded again: `%2e%2e`, `%252e%252e`, `%2f`), another scheme than the
root's, and anything outside the prefix (`.../tenants/acme-evil/...` is not
tenant `acme`'s). A plain absolute path stands for its `file://` URI when
the root is local; a relative one (no scheme, no leading `/`: `datasets/corpus`)
is read under the tenant's prefix (`under_prefix`), whatever the root's scheme.
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import unquote

from workers.schema import SpecError

MAX_DECODINGS = 4  # `%25` nested deeper than this is refused outright
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


class DataUriRefused(SpecError):
    """A data uri outside what the tenant may read; the message says why."""

    def __init__(self, reason: str, field: str = "data.uri"):
        super().__init__(field, f"{field} {reason}")


def data_prefix(root: str, tenant: str) -> str:
    """The tenant's data prefix, with its trailing slash."""
    return f"{root.rstrip('/')}/tenants/{tenant}/data/"


def under_prefix(uri: str, tenant: str, root: str) -> str:
    """A relative uri (no scheme, no leading `/`) joined to the tenant's data
    prefix; any other as it is. The joined uri is checked like any other."""
    if _SCHEME.match(uri) or uri.startswith("/"):
        return uri
    return data_prefix(root, tenant) + uri


def check_data_uri(uri: str, tenant: str, root: str, field: str = "data.uri") -> str:
    """The uri, normalised (a plain path as `file://`), if it lies under the
    tenant's data prefix; DataUriRefused otherwise (at `field`: `init.uri` too)."""
    try:
        return _checked(uri, tenant, root)
    except DataUriRefused as refused:
        if field == refused.field:
            raise
        raise DataUriRefused(str(refused).removeprefix(f"{refused.field} "), field) from None


def _checked(uri: str, tenant: str, root: str) -> str:
    layers = _decodings(uri)
    for layer in layers:
        _check_characters(layer)
    prefix = data_prefix(root, tenant)
    normal = _with_scheme(uri, _scheme_of(prefix))
    if not normal.startswith(prefix):
        raise DataUriRefused(f"must lie under this tenant's data prefix {prefix!r}")
    if len(normal) == len(prefix):
        raise DataUriRefused("must name a file under the data prefix, not the prefix itself")
    for layer in layers:
        _check_segments(layer)
    return normal


def _decodings(uri: str) -> list[str]:
    """The uri, then each percent-decoding of it until nothing changes (and
    each NFKC-normalised: fullwidth dots read as dots somewhere)."""
    layers = [uri]
    while "%" in layers[-1]:
        try:
            decoded = unquote(layers[-1], errors="strict")
        except UnicodeDecodeError:
            raise DataUriRefused("has a percent-encoding that is not UTF-8") from None
        if decoded == layers[-1]:
            break
        if len(layers) > MAX_DECODINGS:
            raise DataUriRefused("is percent-encoded too many times over")
        layers.append(decoded)
    return layers + [n for n in (unicodedata.normalize("NFKC", x) for x in layers) if n not in layers]


def _check_characters(layer: str) -> None:
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in layer) or not layer.isprintable():
        raise DataUriRefused("must not contain control characters (encoded or not)")
    if "\\" in layer:
        raise DataUriRefused("must not contain backslashes (encoded or not)")
    if "::" in layer:
        raise DataUriRefused("must not chain URLs ('a::b')")
    if "?" in layer or "#" in layer:
        raise DataUriRefused("must not have a query string or fragment")


def _check_segments(layer: str) -> None:
    """No `.`, `..` or empty segment anywhere in the path (after the
    scheme's `//`; a local path's leading `/` is no segment)."""
    path = layer.split("://", 1)[1] if "://" in layer else layer
    segments = path.split("/")[1 if path.startswith("/") else 0:]
    if any(s in (".", "..") for s in segments):
        raise DataUriRefused("must not contain '.' or '..' path segments (encoded or not)")
    if "" in segments:
        raise DataUriRefused("must not contain empty path segments ('//') or end with '/'")


def _scheme_of(uri: str) -> str:
    match = _SCHEME.match(uri)
    return match.group(1).lower() if match else "file"


def _with_scheme(uri: str, root_scheme: str) -> str:
    """`scheme://rest` with the scheme in lower case; a plain absolute path
    as `file://path` where the root is local. Another scheme, a relative path,
    or a scheme without `//` is refused."""
    match = _SCHEME.match(uri)
    if match is None:
        if root_scheme != "file" or not uri.startswith("/"):
            raise DataUriRefused(f"must be a {root_scheme}:// URI under this tenant's data prefix")
        return f"file://{uri}"
    scheme, rest = match.group(1).lower(), uri[match.end():]
    if scheme != root_scheme:
        raise DataUriRefused(f"scheme {scheme[:20]!r} is not allowed (only {root_scheme}://)")
    if not rest.startswith("//"):
        raise DataUriRefused(f"must be written {root_scheme}://...")
    return f"{scheme}:{rest}"
