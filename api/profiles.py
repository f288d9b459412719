"""Saved connection profiles (`brigade login`): which Brigade to talk to and
with which key, read by the CLI and by `BrigadeClient()` alike.

The file is YAML, readable by its owner only (mode 0600), at
`BRIGADE_CONFIG` or `$XDG_CONFIG_HOME/brigade/config.yaml` (by default
`~/.config/brigade/config.yaml`):

    default: prod
    profiles:
      prod: {url: https://brigade.example.com, key: bk_...}

What is given explicitly wins, then `BRIGADE_URL` / `BRIGADE_API_KEY`,
then the profile (`BRIGADE_PROFILE`, else the file's default).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_PROFILE = "default"


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
    return Connection(url or saved.get("url") or DEFAULT_URL, key or saved.get("key"))
