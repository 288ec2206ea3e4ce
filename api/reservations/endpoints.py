"""/v1/admin/reservations: prepaid capacity, for admin tokens only."""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.http import ERROR_RESPONSES, PrincipalDep, SessionDep, respond
from api.reservations import service
from gpujobs import plans

router = APIRouter(prefix="/v1/admin/reservations", tags=["admin"], responses=ERROR_RESPONSES)


@router.post("", status_code=201, response_model=plans.Reservation)
def create_reservation(
    body: plans.ReservationCreate, session: SessionDep, principal: PrincipalDep
) -> Response:
    created = service.create(session, principal=principal, body=body)
    session.commit()
    return respond(
        created, status_code=201, headers={"Location": f"/v1/admin/reservations/{created.id}"}
    )


@router.get("", response_model=list[plans.Reservation])
def list_reservations(session: SessionDep, principal: PrincipalDep) -> Response:
    return respond(service.list_reservations(session, principal=principal))


@router.delete("/{reservation_id}", status_code=204, response_class=Response)
def delete_reservation(
    reservation_id: str, session: SessionDep, principal: PrincipalDep
) -> Response:
    service.delete(session, principal=principal, reservation_id=reservation_id)
    session.commit()
    return Response(status_code=204)
