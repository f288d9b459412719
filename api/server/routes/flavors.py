"""Resource flavors (the admin key only): put one (made, or replaced whole;
refused with 409 where a live node would be of it and of another flavor),
list, look at, delete (refused with 409 while an unfinished job asks for
it, naming the jobs, or a tenant's quota names it, naming the tenants). A
flavor is a kind of node, named by the Ray node labels it has
(`service.store.flavors`); a job asks for one by name
(`resources_per_worker.flavor`) and its ranks run only on matching nodes.
Each change is audited (`flavor.put`, `flavor.delete`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Response

from api.schemas.errors import ErrorPublic
from api.schemas.flavors import FlavorPublic, FlavorPut, FlavorsPublic
from api.server.audit import Audit
from api.server.deps import StoreDep, ViewsDep, require_admin
from api.server.errors import not_found
from service.store.records import FlavorRecord
from workers.schema.flavor import FLAVOR_NAME, FLAVOR_NAME_PATTERN

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorPublic} for code in (401, 403, 404, 409, 413, 422, 429)
}
router = APIRouter(prefix="/v1/flavors", tags=["flavors"], responses=ERRORS,
                   dependencies=[Depends(require_admin)])


def _flavor(name: Annotated[str, Path(max_length=64)], store: StoreDep) -> FlavorRecord:
    flavor = store.flavors.get(name) if FLAVOR_NAME.fullmatch(name) else None
    if flavor is None:
        raise not_found("flavor", name)
    return flavor


PathFlavor = Annotated[FlavorRecord, Depends(_flavor)]


@router.get("")
def list_flavors(store: StoreDep) -> FlavorsPublic:
    flavors = store.flavors.list()
    return FlavorsPublic(items=[FlavorPublic.model_validate(f) for f in flavors],
                         total=len(flavors))


@router.get("/{name}")
def get_flavor(flavor: PathFlavor) -> FlavorPublic:
    return FlavorPublic.model_validate(flavor)


@router.put("/{name}")
def put_flavor(name: Annotated[str, Path(pattern=FLAVOR_NAME_PATTERN, max_length=32,
                                          description="a short slug")], body: FlavorPut, store: StoreDep,
               views: ViewsDep, audit: Audit) -> FlavorPublic:
    """Make the flavor, or replace its labels, price and description (409
    where its labels are another flavor's, or a live node has both its labels
    and another flavor's: the 409 names the node and the other flavor). A new
    price applies from now on: the price before it stays what the time before
    it cost."""
    flavor, before = store.flavors.put(name, labels=body.labels,
                                       price_per_worker_hour=body.price_per_worker_hour,
                                       description=body.description,
                                       nodes=views.live_node_labels())
    audit("flavor.put", target=name, labels=flavor.labels,
          price_per_worker_hour=flavor.price_per_worker_hour,
          before=None if before is None else {
              "labels": before.labels, "price_per_worker_hour": before.price_per_worker_hour})
    return FlavorPublic.model_validate(flavor)


@router.delete("/{name}", status_code=204, response_class=Response)
def delete_flavor(flavor: PathFlavor, store: StoreDep, audit: Audit) -> Response:
    """Refused (409, naming them) while an unfinished job asks for the flavor
    or a tenant's quota names it (`quota.flavors`)."""
    store.flavors.delete(flavor.name)
    audit("flavor.delete", target=flavor.name, labels=flavor.labels)
    return Response(status_code=204)
