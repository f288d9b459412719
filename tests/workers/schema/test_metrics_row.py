"""The metrics row, declared once (workers/schema/metrics_row.py): what the engine
writes is what the API serves, and the readers' groups of keys are its keys."""

import subprocess
import sys

import pytest

from workers.schema.metrics_row import RECOVERY_FIELDS, TIMING_FIELDS, MetricRow, row_fields


def test_a_row_travels_with_the_keys_written_and_only_those():
    row = MetricRow(step=3, loss=2.5, mfu=None)
    row.wall_time = 1.0
    assert row.as_dict() == {"step": 3, "loss": 2.5, "mfu": None, "wall_time": 1.0}


def test_served_a_key_the_row_lacks_is_null_and_a_mark_of_no_field_is_left_out():
    served = MetricRow.model_validate({"step": 1, "loss": 0.5, "replayed": True}).model_dump()
    assert served["loss"] == 0.5 and served["eval_loss"] is None and "replayed" not in served


def test_the_api_serves_the_one_row_schema():
    from api.schemas.jobs import MetricRow as Served

    assert Served is MetricRow


def test_the_readers_groups_are_keys_of_the_row():
    assert set(TIMING_FIELDS) | set(RECOVERY_FIELDS) <= set(MetricRow.model_fields)
    with pytest.raises(ValueError, match="wall_tme"):
        row_fields("step", "wall_tme")


def test_the_row_imports_without_torch():
    code = "import sys, workers.schema.metrics_row; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
