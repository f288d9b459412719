"""Optimizers whose update is not elementwise, made exact under sharding:
Muon and Adafactor, each update computed on the whole matrix, never on a shard.

FSDP2 hands an optimizer each parameter's local shard (a DTensor, split on
dim 0 over the data-parallel ranks and, with tensor parallelism, over the TP
ranks too). An elementwise optimizer (AdamW, SGD) is exact on a shard; these
two are not. Muon orthogonalizes its momentum with a Newton-Schulz iteration
over the whole matrix; torch's `Muon` handed FSDP2's DTensor shards lands
elsewhere (2% of the update off after two steps, at world sizes 2 and 3:
tests/workers/engine/test_whole_matrix.py), and on a shard's plain rows it
orthogonalizes the rows alone. Adafactor keeps row and column means of the
squared gradient and scales each step by the parameter's RMS and clips it by
the update's: statistics of the whole tensor (torch's raises on DTensors). So:

    muon       the momentum is kept sharded, laid out like the parameter (its
               update, `lerp`, is elementwise); each hidden matrix's Nesterov
               momentum is gathered whole (one all-gather of the matrix), torch's
               Newton-Schulz orthogonalizes it on one rank (the matrices dealt
               out among the ranks by size, so each runs about 1/N of the
               iterations), which broadcasts the bf16 result, and each rank
               applies its own piece: the same bits on every rank, equal to one
               process's whole update. Embeddings, the head, norms and biases:
               torch's AdamW, today's parameter groups.
    adafactor  each parameter and its gradient are gathered whole and torch's
               Adafactor updates the whole tensor; each rank keeps its piece.
               The factored moments (a row and a column vector per matrix) and
               a vector's second moment are small: every rank holds them whole.

Both use torch's own math (torch.optim.Muon's Newton-Schulz and learning-rate
adjustment, torch.optim.Adafactor's functional update), so one process and
any sharding give the same update for the same whole matrix.

State stays keyed by the model's own parameters (`optimizer.state[param]`),
what DCP's `get_state_dict` maps to parameter names: Muon's momentum is a
DTensor laid out like its parameter (resharded at load, as AdamW's moments
are); Adafactor's whole vectors are plain tensors, the same at any world size.

What a rank holds beyond its shards, transiently in `step()`: Muon, one
whole hidden matrix's momentum (fp32) and its bf16 iterates at a time, and
the whole momenta of the matrices it owns, then their bf16 results, until they
are sent (about 4 B, then 2 B, per hidden-matrix parameter / N); Adafactor,
one whole parameter, its gradient and
torch's variance estimate and update (four whole copies of the largest
tensor, the embedding).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.tensor import DTensor, Replicate
from torch.optim._adafactor import adafactor
from torch.optim._muon import _adjust_lr, _zeropower_via_newtonschulz

from workers.engine.comm import CommCounter
from workers.engine.optimizers import decay_groups
from workers.schema import TrainSpec

MUON_MOMENTUM = 0.95  # torch.optim.Muon's defaults, where the spec leaves a knob unset
MUON_NESTEROV = True


def whole(tensor: Tensor) -> Tensor:
    """The whole tensor a (possibly sharded) tensor is a piece of: gathered
    from every rank that holds a piece (a collective, counted as the
    optimizer's: workers/engine/comm.py), or itself."""
    if not isinstance(tensor, DTensor):
        return tensor
    with CommCounter.attributed("optimizer"):
        return tensor.full_tensor()


def gathered_bytes(params: Iterable[Tensor]) -> float:
    """What gathering each of `params` whole brings this rank, by the ring
    all-gather's count (workers/engine/comm.py): (G - 1) / G of its bytes,
    G the ranks it is split over (FSDP's shard dimension and TP's)."""
    total = 0.0
    for p in params:
        if isinstance(p, DTensor):
            mesh = p.device_mesh
            split = math.prod(mesh.size(i) for i, pl in enumerate(p.placements) if pl.is_shard())
            total += (split - 1) / split * p.numel() * p.element_size()
    return total


def piece(full: Tensor, like: Tensor) -> Tensor:
    """This rank's piece of `full` (the same on every rank), laid out as the
    parameter `like` is: a DTensor with `like`'s mesh and placements (found
    without communication), or `full` itself."""
    if not isinstance(like, DTensor):
        return full
    mesh = like.device_mesh
    replicated = DTensor.from_local(full, mesh, [Replicate()] * mesh.ndim, run_check=False)
    return replicated.redistribute(mesh, like.placements)


def hidden_matrices(model: nn.Module) -> list[nn.Parameter]:
    """The blocks' 2-D weights (the decoder's `blocks`, workers/models): the
    matrices Muon orthogonalizes. Embeddings, the head, norms and biases are not."""
    blocks: nn.Module = model.blocks  # type: ignore[assignment]
    return [p for p in blocks.parameters() if p.ndim == 2]


class _Composite(torch.optim.Optimizer):
    """One optimizer over parts that keep one `state` and one `param_groups`:
    each group names its part (`"part"`), and a torch optimizer that runs a
    part in place (`self.parts`) is handed those very dicts again whenever
    the state is replaced (a load)."""

    def __init__(self, groups: list[dict[str, Any]], defaults: dict[str, Any]):
        super().__init__([g for g in groups if g["params"]], defaults)
        self.parts: dict[str, torch.optim.Optimizer] = {}

    def _groups(self, part: str) -> list[dict[str, Any]]:
        return [g for g in self.param_groups if g["part"] == part]

    def _link(self) -> None:
        for name, optimizer in self.parts.items():
            optimizer.param_groups = self._groups(name)
            optimizer.state = self.state

    def __setstate__(self, state: dict[str, Any]) -> None:  # Optimizer.load_state_dict ends here
        super().__setstate__(state)
        if "parts" in self.__dict__:
            self._link()


class WholeMatrixMuon(_Composite):
    """torch's Muon on the hidden matrices, each orthogonalized whole; torch's
    AdamW on the rest. Group keys as torch's optimizers name them."""

    def __init__(self, model: nn.Module, train: TrainSpec, *, momentum: float, nesterov: bool,
                 ns_steps: int, adjust_lr_fn: str | None):
        hidden = hidden_matrices(model)
        hidden_ids = {id(p) for p in hidden}
        rest = [p for p in model.parameters() if id(p) not in hidden_ids]
        # torch.optim.Muon's own checks and defaults (ns_coefficients, eps) for its group.
        reference = torch.optim.Muon([torch.zeros(1, 1)], lr=train.lr,
                                     weight_decay=train.weight_decay, momentum=momentum,
                                     nesterov=nesterov, ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn)
        muon = reference.defaults | {"params": hidden, "part": "muon"}
        adamw = [g | {"part": "adamw"} for g in decay_groups(rest, train.weight_decay)]
        super().__init__([muon, *adamw], {"lr": train.lr})
        # AdamW's own class runs its groups in place (its defaults fill them).
        if self._groups("adamw"):
            self.parts["adamw"] = torch.optim.AdamW(
                [{"params": g["params"]} for g in self._groups("adamw")],
                lr=train.lr, betas=(train.beta1, train.beta2), eps=train.eps)
            for ours, its in zip(self._groups("adamw"), self.parts["adamw"].param_groups,
                                 strict=True):
                ours.update({k: v for k, v in its.items() if k not in ours})
        self._link()

    def _matrices(self) -> list[Tensor]:
        return [p for g in self._groups("muon") for p in g["params"]]

    @property
    def comm_bytes_per_step(self) -> float:
        """Each hidden matrix's momentum gathered whole, and (received from
        its owner) the bf16 result of each one another rank orthogonalized."""
        owners, results = self._owners(), 0
        if owners:
            rank = dist.get_rank()
            results = sum(p.numel() * 2 for p, owner in zip(self._matrices(), owners, strict=True)
                          if owner != rank)
        return gathered_bytes(self._matrices()) + results

    def _owners(self) -> list[int]:
        """The rank that orthogonalizes each matrix ([]: every rank its own):
        the least loaded so far, by elements, in the matrices' order (the
        same on every rank). Only where every matrix is a DTensor over the
        whole world, of more than one rank."""
        matrices = self._matrices()
        if not (dist.is_initialized() and dist.get_world_size() > 1 and all(
                isinstance(p, DTensor) and p.device_mesh.size() == dist.get_world_size()
                for p in matrices)):
            return []
        load, owners = [0] * dist.get_world_size(), []
        for p in matrices:
            owner = min(range(len(load)), key=lambda r: (load[r], r))
            owners.append(owner)
            load[owner] += p.numel()
        return owners

    @torch.no_grad()
    def step(self, closure=None):
        """torch.optim.Muon's update of each matrix (torch/optim/_muon.py,
        `_single_tensor_muon`), its Newton-Schulz on the whole matrix. Split
        among the ranks: each gathers every matrix's momentum whole, runs the
        iteration on those it owns, then receives each result from its owner
        (a broadcast) and applies its own piece. The same bits reach every
        rank, whichever computed them."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        owners = self._owners()
        split = bool(owners)
        rank = dist.get_rank() if split else 0
        # First every gather (collectives, in the same order on every rank), each
        # rank keeping the matrices it owns; then each runs its own iterations,
        # all ranks at once; then each result goes out from its owner.
        gathered: list[tuple[Tensor, dict[str, Any], int, Tensor | None]] = []
        matrices = iter(owners) if split else None
        for group in self._groups("muon"):
            for p in group["params"]:
                owner = next(matrices) if matrices is not None else rank
                if p.grad is not None:
                    full = whole(self._nesterov_momentum(p, group))
                    gathered.append((p, group, owner, full if owner == rank else None))
        results = [(p, group, owner, None if full is None else _zeropower_via_newtonschulz(
                        full, group["ns_coefficients"], group["ns_steps"], group["eps"]
                    ).contiguous())  # (a wide matrix's comes transposed)
                   for p, group, owner, full in gathered]
        del gathered
        for p, group, owner, result in results:
            if split:  # the owner sends its result, every other rank receives it
                if result is None:
                    local = p.to_local() if isinstance(p, DTensor) else p
                    result = torch.empty(p.shape, dtype=torch.bfloat16, device=local.device)
                _broadcast(result, owner)
            assert result is not None
            lr = group["lr"]
            p.mul_(1 - lr * group["weight_decay"])
            p.add_(piece(result, p), alpha=-_adjust_lr(lr, group["adjust_lr_fn"], p.shape))
        for part in self.parts.values():
            part.step()
        return loss

    def _nesterov_momentum(self, p: Tensor, group: dict[str, Any]) -> Tensor:
        """The momentum's update and what Newton-Schulz is given: elementwise,
        on this rank's shard."""
        grad, momentum = p.grad, group["momentum"]
        assert grad is not None
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(grad, memory_format=torch.preserve_format)
        buf = state["momentum_buffer"]
        buf.lerp_(grad, 1 - momentum)
        return grad.lerp(buf, momentum) if group["nesterov"] else buf


def _broadcast(result: Tensor, owner: int) -> None:
    """Broadcast `result` from `owner` to every rank, counted as the
    optimizer's (workers/engine/comm.py): the bytes a rank receives."""
    counter = CommCounter.current()
    received = 0 if dist.get_rank() == owner else result.numel() * result.element_size()
    if counter is None:
        dist.broadcast(result, src=owner)
    else:
        counter.timed("optimizer_broadcast", received, dist.broadcast, result, src=owner)


class WholeMatrixAdafactor(torch.optim.Optimizer):
    """torch's Adafactor, each parameter updated whole (gathered, updated,
    its piece kept); the factored moments held whole on every rank."""

    def __init__(self, model: nn.Module, train: TrainSpec, *, beta2_decay: float,
                 eps: tuple[float | None, float]):
        # The class's own checks and defaults (d, maximize) for our groups.
        reference = torch.optim.Adafactor([torch.zeros(1)], lr=train.lr, beta2_decay=beta2_decay,
                                          eps=eps)
        super().__init__(decay_groups(model.parameters(), train.weight_decay),
                         {k: v for k, v in reference.defaults.items() if k != "weight_decay"})

    @property
    def comm_bytes_per_step(self) -> float:
        """Each parameter and its gradient gathered whole, once a step."""
        return 2 * gathered_bytes(p for g in self.param_groups for p in g["params"])

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._whole_step(p, group)
        return loss

    def _whole_step(self, p: Tensor, group: dict[str, Any]) -> None:
        assert p.grad is not None
        state = self.state[p]
        # A DTensor's whole is a new tensor; a plain parameter is updated in place.
        full_p, full_grad = whole(p.detach()), whole(p.grad)
        if not state:  # as torch.optim.Adafactor's _init_group, at the whole shape
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
            if full_grad.dim() > 1:
                state["row_var"] = full_grad.new_zeros((*full_grad.shape[:-1], 1))
                state["col_var"] = full_grad.new_zeros((*full_grad.shape[:-2], 1, full_grad.shape[-1]))
            else:
                state["variance"] = torch.zeros_like(full_grad)
        eps1, eps2 = group["eps"]
        adafactor([full_p], [full_grad], [state.get("row_var")], [state.get("col_var")],
                  [state.get("variance")], [state["step"]],
                  d=group["d"], lr=group["lr"], beta2_decay=group["beta2_decay"],
                  weight_decay=group["weight_decay"], eps1=eps1, eps2=eps2, foreach=False,
                  maximize=group["maximize"], grad_scale=None, found_inf=None, has_complex=False)
        mine = piece(full_p, p)
        (p.to_local() if isinstance(p, DTensor) else p).copy_(
            mine.to_local() if isinstance(mine, DTensor) else mine)


def build_muon(model: nn.Module, train: TrainSpec) -> torch.optim.Optimizer:
    """`train.optimizer: muon` (workers/schema/recipes.py MUON)."""
    return WholeMatrixMuon(
        model, train,
        momentum=_knob(train, "momentum", MUON_MOMENTUM),
        nesterov=_knob(train, "nesterov", MUON_NESTEROV),
        ns_steps=train.ns_steps,
        adjust_lr_fn=train.adjust_lr_fn,
    )


def build_adafactor(model: nn.Module, train: TrainSpec) -> torch.optim.Optimizer:
    """`train.optimizer: adafactor` (workers/schema/recipes.py ADAFACTOR). `train.eps`,
    where the spec sets it, is torch's eps1 (the floor of the squared-gradient
    estimate); unset, torch's (None: the dtype's epsilon, 1e-3)."""
    eps1 = train.eps if "eps" in train.model_fields_set else None
    return WholeMatrixAdafactor(model, train, beta2_decay=train.beta2_decay, eps=(eps1, 1e-3))


def _knob(train: TrainSpec, name: str, default: Any) -> Any:
    """The spec's value of an optimizer knob that may be unset (None): torch's default then."""
    value = getattr(train, name)
    return default if value is None else value
