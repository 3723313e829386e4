from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="EndpointAttempt")


@_attrs_define
class EndpointAttempt:
    """One attempt in an endpoint's log (the event's attempts have the error text and a
    longer response excerpt).

        Attributes:
            attempt (int): 1-based attempt number within the budget.
            endpoint_id (str): Endpoint.
            event_id (str): Event (`webhook-id`).
            latency_ms (int): Start to end of the answer (or the error), milliseconds.
            outcome (str): `delivered`, `retry`, `requeued` (the receiver pushed back or the failure was
                ours: the same attempt went back on the queue, none spent), `duplicate` (copies
                of the message found the pair delivered and were dropped without a POST),
                `dead_letter:<reason>` or `abandoned`.
            replay_count (int): Replays before this budget (0: the first; a resend or a DLQ replay adds one).
            started_at (datetime.datetime): When the attempt started.
            takeover (int): 0, or the n-th takeover of the attempt after a lost lease.
            error_class (None | str | Unset): Error class, when there was no usable answer.
            response_excerpt (None | str | Unset): The start of what the receiver answered, for an attempt that was not
                delivered
                (at most 100 bytes, on one line); `null` when it answered no body, or was
                delivered.
            status (int | None | Unset): HTTP status, when the receiver answered.
    """

    attempt: int
    endpoint_id: str
    event_id: str
    latency_ms: int
    outcome: str
    replay_count: int
    started_at: datetime.datetime
    takeover: int
    error_class: None | str | Unset = UNSET
    response_excerpt: None | str | Unset = UNSET
    status: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        attempt = self.attempt

        endpoint_id = self.endpoint_id

        event_id = self.event_id

        latency_ms = self.latency_ms

        outcome = self.outcome

        replay_count = self.replay_count

        started_at = self.started_at.isoformat()

        takeover = self.takeover

        error_class: None | str | Unset
        if isinstance(self.error_class, Unset):
            error_class = UNSET
        else:
            error_class = self.error_class

        response_excerpt: None | str | Unset
        if isinstance(self.response_excerpt, Unset):
            response_excerpt = UNSET
        else:
            response_excerpt = self.response_excerpt

        status: int | None | Unset
        if isinstance(self.status, Unset):
            status = UNSET
        else:
            status = self.status

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "attempt": attempt,
                "endpoint_id": endpoint_id,
                "event_id": event_id,
                "latency_ms": latency_ms,
                "outcome": outcome,
                "replay_count": replay_count,
                "started_at": started_at,
                "takeover": takeover,
            }
        )
        if error_class is not UNSET:
            field_dict["error_class"] = error_class
        if response_excerpt is not UNSET:
            field_dict["response_excerpt"] = response_excerpt
        if status is not UNSET:
            field_dict["status"] = status

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        attempt = d.pop("attempt")

        endpoint_id = d.pop("endpoint_id")

        event_id = d.pop("event_id")

        latency_ms = d.pop("latency_ms")

        outcome = d.pop("outcome")

        replay_count = d.pop("replay_count")

        started_at = datetime.datetime.fromisoformat(d.pop("started_at"))

        takeover = d.pop("takeover")

        def _parse_error_class(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        error_class = _parse_error_class(d.pop("error_class", UNSET))

        def _parse_response_excerpt(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        response_excerpt = _parse_response_excerpt(d.pop("response_excerpt", UNSET))

        def _parse_status(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        status = _parse_status(d.pop("status", UNSET))

        endpoint_attempt = cls(
            attempt=attempt,
            endpoint_id=endpoint_id,
            event_id=event_id,
            latency_ms=latency_ms,
            outcome=outcome,
            replay_count=replay_count,
            started_at=started_at,
            takeover=takeover,
            error_class=error_class,
            response_excerpt=response_excerpt,
            status=status,
        )

        endpoint_attempt.additional_properties = d
        return endpoint_attempt

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
