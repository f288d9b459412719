"""The data sections: what a job trains on (`data`), what it validates on
(`eval`), and what a preparation job tokenizes (`prepare`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from workers.schema.base import _Section, refusal

MAX_MIX_MEMBERS = 64


class MixMember(_Section):
    """One token dataset of a mixture: its prefix and its share of the
    samples (`weight`, relative to the other members')."""

    uri: Annotated[str, Field(min_length=1, max_length=2048)]
    weight: Annotated[float, Field(gt=0, le=1e6)]

    @field_validator("uri")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.isprintable():
            raise ValueError("data uris must not contain control characters")
        return value


class DataSpec(_Section):
    # builtin: bytes of the standard library; synthetic: seeded progressions;
    # uri: a byte/text file at an fsspec URI (under the tenant's data prefix);
    # tokens: a prepared token dataset, uri its prefix (workers/datasets/index.py),
    # or a mixture of them (`mix`, instead of `uri`: workers/datasets/mixture.py);
    # text: a small jsonl or parquet file, tokenized as read with `tokenizer`
    source: Literal["builtin", "synthetic", "uri", "tokens", "text"] = "builtin"
    uri: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    mix: Annotated[list[MixMember], Field(min_length=1, max_length=MAX_MIX_MEMBERS)] | None = None
    field: Annotated[str, Field(min_length=1, max_length=256)] = "text"  # text: the documents' field
    tokenizer: Annotated[str, Field(min_length=1, max_length=2048)] | None = None  # text: its uri
    # tokens: each rank checks the sha256 of its share of the shards at start
    verify_checksums: bool = True

    @field_validator("uri", "tokenizer")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and not value.isprintable():
            raise ValueError("data uris must not contain control characters")
        return value

    @model_validator(mode="after")
    def _uri_with_source(self) -> DataSpec:
        if self.mix is not None:
            return self._mixture()
        if self.source in URI_SOURCES and not self.uri:
            raise refusal("uri", f"data.uri is required when data.source is {self.source!r}")
        if self.source not in URI_SOURCES and self.uri:
            raise refusal("uri", f"data.uri is only used with data.source one of "
                                 f"{', '.join(URI_SOURCES)}, not {self.source!r}", self.uri)
        if self.source == "text" and not self.tokenizer:
            raise refusal("tokenizer", "data.tokenizer (a tokenizers JSON file's uri) is required "
                                       "when data.source is 'text'")
        if self.source != "text" and self.tokenizer:
            raise refusal("tokenizer", "data.tokenizer is only used with data.source 'text' (a "
                                       "token dataset records its own)", self.tokenizer)
        return self

    def _mixture(self) -> DataSpec:
        """`mix` is the alternative to `uri` for token datasets: exactly one of
        them, each member once."""
        assert self.mix is not None
        if self.source != "tokens":
            raise refusal("mix", f"data.mix mixes token datasets (data.source 'tokens'), not "
                                 f"{self.source!r}", self.source)
        if self.uri is not None:
            raise refusal("uri", "data takes exactly one of uri (a token dataset) and mix "
                                 "(several, with weights)", self.uri)
        if self.tokenizer is not None:
            raise refusal("tokenizer", "data.tokenizer is only used with data.source 'text' (a "
                                       "token dataset records its own)", self.tokenizer)
        seen: dict[str, int] = {}
        for i, member in enumerate(self.mix):
            if member.uri in seen:
                raise refusal(f"mix.{i}.uri", f"data.mix.{i}.uri names the dataset of "
                              f"data.mix.{seen[member.uri]}.uri again: give it one member, "
                              "its weight the sum", member.uri)
            seen[member.uri] = i
        return self

    def mix_names(self) -> list[str]:
        """Each mixture member's name in the metrics rows (`mix_tokens`,
        `mix_eval_loss`): the last part of its uri, or as many last parts
        as tell the members apart (`wiki/train`, `code/train`)."""
        paths = [m.uri.split("://", 1)[-1].rstrip("/").split("/") for m in self.mix or ()]
        for depth in range(1, max((len(p) for p in paths), default=0) + 1):
            names = ["/".join(p[-depth:]) for p in paths]
            if len(set(names)) == len(names):
                return names
        return [m.uri for m in self.mix or ()]

    def uris(self) -> dict[str, str]:
        """Every uri this section names, by its field (what the service checks)."""
        named = {f"data.{name}": value for name in ("uri", "tokenizer")
                 if (value := getattr(self, name)) is not None}
        for i, member in enumerate(self.mix or ()):
            named[f"data.mix.{i}.uri"] = member.uri
        return named


URI_SOURCES = ("uri", "tokens", "text")
TOKEN_SOURCES = ("tokens", "text")  # their vocabulary is the dataset's tokenizer's
# DataSpec's fields a byte or synthetic source leaves out of the config hash (as before them)
TOKEN_DATA_FIELDS = ("field", "tokenizer", "verify_checksums")


class EvalSpec(_Section):
    """A validation loss every `every_steps`: the mean token loss over a fixed
    set of `batches` x train.global_batch_size samples, from another token
    dataset (`uri`) or a held-out tail of the training one (`holdout_fraction`)."""

    uri: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    holdout_fraction: Annotated[float, Field(gt=0, le=0.5)] | None = None
    every_steps: Annotated[int, Field(ge=1, le=10_000_000)] = 100
    batches: Annotated[int, Field(ge=1, le=10_000)] = 1

    @field_validator("uri")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and not value.isprintable():
            raise ValueError("eval.uri must not contain control characters")
        return value

    @model_validator(mode="after")
    def _one_set(self) -> EvalSpec:
        if (self.uri is None) == (self.holdout_fraction is None):
            raise refusal("uri", "eval takes exactly one of uri (a token dataset) and "
                                 "holdout_fraction", self.uri)
        return self




MAX_PREPARE_FILES = 100_000


class PrepareSpec(_Section):
    """A dataset-preparation job (kind 'prepare', `POST /v1/datasets`): its
    ranks tokenize `inputs` (the files, expanded and sorted at submit) into
    a token dataset at `output` (workers/datasets/prepare.py), one file a
    step: train.steps is the number of files."""

    inputs: Annotated[list[Annotated[str, Field(min_length=1, max_length=2048)]],
                      Field(min_length=1, max_length=MAX_PREPARE_FILES)]
    output: Annotated[str, Field(min_length=1, max_length=2048)]
    tokenizer: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    train_vocab_size: Annotated[int, Field(ge=2, le=1_048_576)] | None = None
    field: Annotated[str, Field(min_length=1, max_length=256)] = "text"
    tokens_per_shard: Annotated[int, Field(ge=1, le=1 << 30)] = 1 << 24

    @model_validator(mode="after")
    def _one_tokenizer(self) -> PrepareSpec:
        if (self.tokenizer is None) == (self.train_vocab_size is None):
            raise refusal("tokenizer", "prepare takes exactly one of tokenizer (a tokenizers JSON "
                                       "file) and train_vocab_size (train one on the inputs)")
        return self

    def uris(self) -> dict[str, str]:
        """Every uri it names, by its field (what the service checks)."""
        named = {f"prepare.inputs.{i}": uri for i, uri in enumerate(self.inputs)}
        named["prepare.output"] = self.output
        if self.tokenizer is not None:
            named["prepare.tokenizer"] = self.tokenizer
        return named
