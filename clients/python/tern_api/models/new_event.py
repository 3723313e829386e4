from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.new_event_payload import NewEventPayload


T = TypeVar("T", bound="NewEvent")


@_attrs_define
class NewEvent:
    """A new event.

    Example:
        {'id': 'evt_3f9c2b7e-order-o_1-paid', 'payload': {'amount': 4200, 'order_id': 'o_1'}, 'type': 'order.paid'}

    Attributes:
        payload (NewEventPayload): The payload: a JSON object, delivered byte for byte as sent, at most the
            deployment's payload limit (256 KiB by default).
        type_ (str): Event type: 1-128 characters of `A-Za-z0-9._:-`.
        id (None | str | Unset): Your event id (1-128 characters of `A-Za-z0-9_-`), the `webhook-id` receivers see.
            Publishing again with the same id and the same type and payload returns the
            original event; with a different one, 409. Ids are unique across the deployment:
            use unguessable ones (a UUID). Default: a new `evt_` id.
        traceparent (None | str | Unset): The W3C Trace Context `traceparent` of the code that publishes
            (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`, lowercase, ids not all zeros):
            Tern's spans of this event (the fan-out, every attempt, the dead letter, a replay)
            join that trace. Default: the request's own `traceparent` header when it holds a
            valid one, else none (the event starts a trace of its own). An invalid one here is
            a 400 naming `traceparent`.
        tracestate (None | str | Unset): The W3C Trace Context `tracestate` that goes with `traceparent`: at most 512
            characters and 32 `key=value` members (W3C Trace Context §3.3.1). Read only with
            `traceparent`: alone it is checked, then not used.
    """

    payload: NewEventPayload
    type_: str
    id: None | str | Unset = UNSET
    traceparent: None | str | Unset = UNSET
    tracestate: None | str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        payload = self.payload.to_dict()

        type_ = self.type_

        id: None | str | Unset
        if isinstance(self.id, Unset):
            id = UNSET
        else:
            id = self.id

        traceparent: None | str | Unset
        if isinstance(self.traceparent, Unset):
            traceparent = UNSET
        else:
            traceparent = self.traceparent

        tracestate: None | str | Unset
        if isinstance(self.tracestate, Unset):
            tracestate = UNSET
        else:
            tracestate = self.tracestate

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "payload": payload,
                "type": type_,
            }
        )
        if id is not UNSET:
            field_dict["id"] = id
        if traceparent is not UNSET:
            field_dict["traceparent"] = traceparent
        if tracestate is not UNSET:
            field_dict["tracestate"] = tracestate

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.new_event_payload import NewEventPayload

        d = dict(src_dict)
        payload = NewEventPayload.from_dict(d.pop("payload"))

        type_ = d.pop("type")

        def _parse_id(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        id = _parse_id(d.pop("id", UNSET))

        def _parse_traceparent(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        traceparent = _parse_traceparent(d.pop("traceparent", UNSET))

        def _parse_tracestate(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        tracestate = _parse_tracestate(d.pop("tracestate", UNSET))

        new_event = cls(
            payload=payload,
            type_=type_,
            id=id,
            traceparent=traceparent,
            tracestate=tracestate,
        )

        return new_event
