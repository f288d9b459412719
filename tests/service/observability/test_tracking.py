"""Experiment tracking: TensorBoard event files written through fsspec and
read back with TensorBoard's own reader; an MLflow run per job (an
experiment per tenant) read back with MLflow's client against a file
store, found again by a second runner; a tracker that fails is left off."""

from __future__ import annotations

import fsspec
import pytest

from service.states import JobState
from service.observability.tracking import JobTracking, MlflowRun, TensorBoardFiles

ROWS = [{"step": s, "loss": 5.0 - s / 10, "lr": 1e-3 * s, "tokens_per_s": 100, "checkpoint_step": None,
         "comm_bytes_by_op": {"all_gather": 1}, "replayed": True} for s in (1, 2, 3)]


def scalars(directory: str) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(directory)
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_tensorboard_files_read_back_by_tensorboard(tmp_path):
    fs = fsspec.filesystem("file")
    files = TensorBoardFiles(fs, str(tmp_path / "tensorboard"), "brigade-j-1")
    files.add(ROWS[:2])
    files.flush(force=True)
    files.add(ROWS[2:])
    files.flush(force=True)  # rewritten whole: still one file
    assert len(list((tmp_path / "tensorboard").iterdir())) == 1
    found = scalars(str(tmp_path / "tensorboard"))
    assert set(found) == {"loss", "lr", "tokens_per_s"}  # numbers only
    assert [step for step, _ in found["loss"]] == [1, 2, 3]
    assert found["loss"][2][1] == pytest.approx(4.7)


def test_an_mlflow_run_per_job_in_its_tenants_experiment(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps its file store opt-in

    uri = f"file://{tmp_path}/mlruns"
    run = MlflowRun(uri, "team-a", "j-1", "demo")
    run.add(ROWS)
    again = MlflowRun(uri, "team-a", "j-1", "demo")  # a control plane restarted: the same run
    assert again.run_id == run.run_id
    again.end(JobState.SUCCEEDED)

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("brigade/team-a")
    (found,) = client.search_runs([experiment.experiment_id])
    assert found.info.run_name == "j-1" and found.info.status == "FINISHED"
    assert found.data.tags["brigade.tenant"] == "team-a"
    history = client.get_metric_history(found.info.run_id, "loss")
    assert [(m.step, round(m.value, 6)) for m in history] == [(1, 4.9), (2, 4.8), (3, 4.7)]


def test_a_tracker_that_fails_is_left_off_and_says_why(tmp_path):
    def broken():
        raise ConnectionError("tracking server gone")

    fs = fsspec.filesystem("file")
    tracking = JobTracking("j-2", {"mlflow": broken, "tensorboard": lambda: TensorBoardFiles(
        fs, str(tmp_path / "tb"), "r")})
    tracking.record(ROWS)
    assert tracking.problems == ["mlflow tracking failed and is left off: ConnectionError: "
                                 "tracking server gone"]
    tracking.problems = []
    tracking.record(ROWS)
    tracking.end(JobState.FAILED)
    assert tracking.problems == [] and scalars(str(tmp_path / "tb"))["loss"]


def test_a_mixtures_metrics_are_a_series_a_member(tmp_path):
    fs = fsspec.filesystem("file")
    files = TensorBoardFiles(fs, str(tmp_path / "tensorboard"), "brigade-j-2")
    files.add([{"step": 1, "loss": 2.0, "mix_tokens": {"wiki": 96, "code/v1": 288},
                "mix_eval_loss": {"wiki": 1.5, "code/v1": None}}])
    files.flush(force=True)
    found = scalars(str(tmp_path / "tensorboard"))
    assert set(found) == {"loss", "mix_tokens/wiki", "mix_tokens/code/v1", "mix_eval_loss/wiki"}
    assert found["mix_tokens/code/v1"] == [(1, 288.0)]
