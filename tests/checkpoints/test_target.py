"""Where a job's checkpoints live (checkpoints/target.py): a frozen value the
control plane hands as itself to the ranks (pickled by Ray) and the exports."""

import dataclasses
import pickle

import pytest

from checkpoints import CheckpointTarget


def target() -> CheckpointTarget:
    return CheckpointTarget(root="memory://ckpt", tenant="acme", job="j1", secret="s3cret",
                            storage_options={"anon": True})


def test_a_target_is_frozen_and_pickles_as_it_is():
    t = target()
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.job = "j2"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(t)) == t


def test_as_plain_data_and_back():
    t = target()
    assert CheckpointTarget.from_dict(t.to_dict()) == t
    assert t.to_dict()["secret"] == "s3cret"


def test_its_secret_stays_out_of_its_repr():
    assert "s3cret" not in repr(target())


def test_another_job_of_the_same_tenant_keeps_storage_and_secret():
    other = target().of_job("j0")
    assert (other.job, other.tenant, other.secret, other.storage_options) == ("j0", "acme", "s3cret",
                                                                              {"anon": True})
