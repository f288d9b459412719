"""tests/ci.py: one reading of the CI variable, and what a missing
prerequisite does with it (skip on a developer's machine, fail under CI) —
here for the tmpfs the full-disk chaos test and the soak mount."""

from __future__ import annotations

import subprocess

import pytest

from tests.chaos import chaos_harness
from tests.ci import in_ci, skip_or_fail


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "True", "yes", "Yes", " true "])
def test_ci_is_on_for_one_true_yes_in_any_case(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    assert in_ci()


@pytest.mark.parametrize("value", [None, "", "0", "false", "no", "off", "anything"])
def test_ci_is_off_otherwise(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert not in_ci()


def test_a_missing_prerequisite_skips_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no widget"):
        skip_or_fail("no widget here")


def test_a_missing_prerequisite_fails_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI: this test must run, but no widget"):
        skip_or_fail("no widget here")


def refused(*args, **kwargs):
    return subprocess.CompletedProcess(args[0], 32, "", "mount: only root can do that")


@pytest.mark.parametrize("ci, outcome", [(None, pytest.skip.Exception), ("true", pytest.fail.Exception)])
def test_a_refused_tmpfs_mount_skips_outside_ci_and_fails_under_it(monkeypatch, tmp_path, ci, outcome):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(chaos_harness.subprocess, "run", refused)
    with pytest.raises(outcome, match="only root can do that"), chaos_harness.tmpfs(tmp_path / "disk", "1m"):
        pytest.fail("entered a tmpfs that was not mounted")
