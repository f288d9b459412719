"""Saved connection profiles (`brigade login`): which Brigade to talk to and
with which key, read by the CLI and by `BrigadeClient()` alike.

The file is YAML, readable by its owner only (mode 0600), at
`BRIGADE_CONFIG` or `$XDG_CONFIG_HOME/brigade/config.yaml` (by default
`~/.config/brigade/config.yaml`):

    default: prod
    profiles:
      prod: {url: https://brigade.example.com, key: bk_...}

What is given explicitly wins, then `BRIGADE_URL` / `BRIGADE_API_KEY`,
then the profile (`BRIGADE_PROFILE`, else the file's default), then the
`brigade serve` of this directory: the URL its latest start recorded in its
data dir (`BRIGADE_DATA_DIR`, by default `./.data`, file `server_url`) and,
for the CLI, the admin key it keeps there (`admin_key`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_PROFILE = "default"
SERVER_URL_FILE = "server_url"  # in a `brigade serve`'s data dir, beside its admin_key


class ProfileError(ValueError):
    """A config file that cannot be read, or a profile it does not have."""


@dataclass(frozen=True)
class Connection:
    url: str
    key: str | None


def config_path() -> Path:
    if explicit := os.environ.get("BRIGADE_CONFIG"):
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "brigade" / "config.yaml"


def load() -> dict:
    """The config file's contents ({} when there is none)."""
    path = config_path()
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        return {}
    except (OSError, yaml.YAMLError) as e:
        raise ProfileError(f"cannot read the Brigade config {path}: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("profiles", {}), dict):
        raise ProfileError(f"{path}: not a Brigade config (a mapping with 'profiles')")
    return data


def save_profile(name: str, url: str, key: str, *, make_default: bool) -> Path:
    """Write (or replace) profile `name`; the file is created with mode 0600
    and kept so."""
    data = load()
    data.setdefault("profiles", {})[name] = {"url": url, "key": key}
    if make_default or "default" not in data:
        data["default"] = name
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older file made with looser permissions is tightened
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(data, f, sort_keys=False)
    return path


def resolve(url: str | None = None, key: str | None = None,
            profile: str | None = None) -> Connection:
    """The URL and key to use: given, else from the environment, else from
    the profile (a profile named but missing is an error)."""
    url = url or os.environ.get("BRIGADE_URL") or None
    key = key or os.environ.get("BRIGADE_API_KEY") or None
    if url and key:
        return Connection(url, key)
    data = load()
    name = profile or os.environ.get("BRIGADE_PROFILE") or data.get("default")
    saved = data.get("profiles", {}).get(name) if name else None
    if name and saved is None and (profile or os.environ.get("BRIGADE_PROFILE")):
        known = ", ".join(sorted(data.get("profiles", {}))) or "none yet: `brigade login`"
        raise ProfileError(f"no profile {name!r} in {config_path()} (profiles: {known})")
    saved = saved if isinstance(saved, dict) else {}
    return Connection(url or saved.get("url") or local_server_url() or DEFAULT_URL,
                      key or saved.get("key"))


def local_data_dir() -> Path:
    """The data dir of a `brigade serve` started here (as service.settings
    defaults it)."""
    return Path(os.environ.get("BRIGADE_DATA_DIR") or Path.cwd() / ".data")


def record_server_url(data_dir: str | Path, url: str) -> Path:
    """`brigade serve` writes the URL it listens on beside its admin key
    (mode 0600), for the CLI run in the same directory."""
    path = Path(data_dir) / SERVER_URL_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(url + "\n")
    return path


def local_server_url() -> str | None:
    """The URL the latest `brigade serve` of this directory listened on."""
    return _read(local_data_dir() / SERVER_URL_FILE)


def local_admin_key() -> str | None:
    """BRIGADE_ADMIN_KEY, or the key a `brigade serve` of this directory
    generated (service.settings keeps it as `admin_key` in its data dir)."""
    return os.environ.get("BRIGADE_ADMIN_KEY") or _read(local_data_dir() / "admin_key")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None
