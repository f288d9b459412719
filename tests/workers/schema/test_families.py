"""Model families through the `brigade.models` entry points: the built-ins
registered as an operator's own are, a family added by a distribution that
Brigade knows nothing of (a dist-info on sys.path), refusals that name the
registered families, and counts by FSDP unit that match the built models."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from pydantic import ValidationError

from tests.workers.engine_spec import engine_job
from tests.workers.schema.distribution import distribution_on_path
from workers.schema.families import ENTRY_POINT_GROUP, model_family, registered_families
from workers.schema import JobSpec, ModelSpec

OPERATOR_FAMILY = '''
"""An operator's family: torch-free here, the model in tinylm_model."""
from workers.schema.families import Family, ParamCount

def count(spec):
    d = spec.d_model
    return ParamCount(embedding=spec.vocab_size * d, block=d * d * spec.mlp_ratio * 2 + 2 * d,
                      n_blocks=spec.n_layers, head=spec.vocab_size * d, root=0)

FAMILY = Family("tinylm", "tinylm_model:TinyLM", count, frozenset({"mlp_ratio"}))
'''

OPERATOR_MODEL = '''
import torch
from torch import nn

class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm = nn.LayerNorm(cfg.d_model)
        self.up = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model, bias=False)
        self.down = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x))))

class TinyLM(nn.Module):
    tied = False

    def __init__(self, cfg):
        super().__init__()
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, idx):
        x = self.embedding(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x)
'''


@pytest.fixture
def operator_distribution(tmp_path, monkeypatch):
    """A distribution `tinylm-brigade` with an entry point in `brigade.models`,
    on sys.path the way an installed package is: no edit of Brigade."""
    with distribution_on_path(
            tmp_path, monkeypatch, "tinylm-brigade",
            {"tinylm_family": OPERATOR_FAMILY, "tinylm_model": OPERATOR_MODEL},
            f"[{ENTRY_POINT_GROUP}]\ntinylm = tinylm_family:FAMILY\n") as root:
        yield root


def test_the_built_ins_are_registered_through_entry_points():
    assert {"gpt", "llama"} <= set(registered_families())
    assert model_family("llama").builder == "workers.models.llama:Llama"


def test_an_unregistered_family_is_refused_naming_the_registered_ones():
    with pytest.raises(ValidationError) as e:
        ModelSpec(family="mamba")
    error = e.value.errors()[0]
    assert error["loc"] == ("family",)
    assert error["msg"] == ("model.family 'mamba' is not a registered model family "
                            f"(registered: {', '.join(registered_families())})")


def test_a_field_the_family_does_not_read_is_refused():
    with pytest.raises(ValidationError, match="model.rope_theta is not a field of the 'gpt' family"):
        ModelSpec(family="gpt", rope_theta=5e5)


def test_an_operator_family_from_its_own_distribution_trains(operator_distribution):
    from workers.engine.local import run_single_process

    assert "tinylm" in registered_families()
    job = engine_job(3, model={"family": "tinylm", "mlp_ratio": 2},
                     sharding={"activation_checkpointing": True}, data={"source": "synthetic"})
    metrics = run_single_process(job)
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert metrics[0]["mem_theory_bytes"] == 16 * job.model.num_params()  # its own count, exact
    with pytest.raises(ValidationError, match="model.n_kv_heads is not a field of the 'tinylm'"):
        ModelSpec(family="tinylm", n_kv_heads=2)


def test_validating_a_spec_imports_no_torch():
    code = textwrap.dedent("""
        import sys
        from workers.schema import JobSpec
        spec = JobSpec.model_validate({"model": {"family": "llama", "n_kv_heads": 2},
                                       "train": {"steps": 1}})
        spec.model.num_params()
        assert "torch" not in sys.modules, sorted(m for m in sys.modules if "torch" in m)[:5]
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


CASES = {
    "gpt": dict(n_layers=3, d_model=32, n_heads=4, seq_len=16, vocab_size=300),
    "llama": dict(family="llama", n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, ffn_dim=48,
                  qkv_bias=True),
    "llama-tied": dict(family="llama", n_layers=2, d_model=32, n_heads=2, tie_embeddings=True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_counts_by_unit_match_the_built_model(case):
    from workers.models import build_model

    spec = ModelSpec(**CASES[case])
    model = build_model(spec)
    count = spec.param_count()

    def numel(module):
        return sum(p.numel() for p in module.parameters())

    assert count.total == numel(model)
    assert count.block == numel(model.blocks[0]) and count.n_blocks == len(model.blocks)
    assert count.embedding == numel(model.embedding)
    root = numel(model) - numel(model.blocks) - (0 if model.tied else numel(model.head)
                                                 + numel(model.embedding))
    assert count.root + (count.embedding if model.tied else 0) == root
    assert count.largest_unit(2) == max(2 * count.block, count.embedding, count.head, root)


@pytest.mark.parametrize("case", sorted(CASES))
def test_shapes_are_the_built_models(case):
    from workers.models import build_model

    spec = ModelSpec(**CASES[case])
    model = build_model(spec)
    shapes = spec.family_spec.shapes(spec)
    block_ids = {id(p) for p in model.blocks.parameters()}
    assert shapes.n_blocks == len(model.blocks)
    assert sorted(shapes.block) == sorted(tuple(p.shape) for p in model.blocks[0].parameters())
    assert sorted(shapes.rest) == sorted(tuple(p.shape) for p in model.parameters()
                                         if id(p) not in block_ids)


def test_a_gpt_config_hash_still_leaves_out_the_new_fields():
    spec = JobSpec.model_validate({"model": {"n_layers": 2}, "train": {"steps": 3}})
    assert spec.config_hash() == "2444a747562abe63cf6d305ee442b816b007edc5a2745f625e2af184aaa338d4"
