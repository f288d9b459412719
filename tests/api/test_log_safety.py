"""User text in logs: the access log's request paths and a job's log lines are
one printable line each; the generated admin key is shown by the start that
made it, and never again."""

from __future__ import annotations

import logging

from api.server.access_log import PrintableArgs
from api.cli.main import _admin_key_line
from service.log_text import printable
from service.settings import Settings


def test_a_forged_newline_in_a_request_path_stays_on_one_access_log_line():
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1,
                               '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5", "GET", "/v1/jobs/x\n127.0.0.1 - \"GET /admin\" 200",
                                "1.1", 404), None)
    assert PrintableArgs().filter(record)
    line = record.getMessage()
    assert "\n" not in line and "x\\n127.0.0.1" in line and line.endswith("404")


def test_printable_escapes_control_characters_and_bounds_length():
    assert printable("a\r\nb\x1b[31mc\x00") == "a\\r\\nb\\x1b[31mc\\x00"
    assert printable("tab\tkept") == "tab\tkept"
    assert printable("é ü 中") == "é ü 中"
    cut = printable("y" * 100, limit=10)
    assert cut == "y" * 10 + "...[90 more chars]"


def test_the_generated_admin_key_is_shown_once(tmp_path):
    settings = Settings(data_dir=str(tmp_path))
    key, generated = settings.ensure_admin_key()
    first = _admin_key_line(settings, key, generated)
    assert generated and key in first and "shown this once" in first
    again = Settings(data_dir=str(tmp_path))
    key2, generated2 = again.ensure_admin_key()
    second = _admin_key_line(again, key2, generated2)
    assert key2 == key and not generated2 and key not in second
    assert (tmp_path / "admin_key").stat().st_mode & 0o077 == 0  # owner only
    preset = Settings(data_dir=str(tmp_path), admin_key="k" * 32)
    assert "k" * 32 not in _admin_key_line(preset, *preset.ensure_admin_key())
