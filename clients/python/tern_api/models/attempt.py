from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="Attempt")


@_attrs_define
class Attempt:
    """One try of an event to an endpoint, with its details.

    Attributes:
        attempt (int): 1-based attempt number within the budget.
        endpoint_id (str): Endpoint.
        excerpt_truncated (bool): True when the body was longer than the excerpt.
        latency_ms (int): Start to end, milliseconds.
        outcome (str): `delivered`, `retry`, `requeued` (the receiver pushed back or the failure was
            ours: the same attempt went back on the queue, none spent), `duplicate` (copies
            of the message found the pair delivered and were dropped without a POST),
            `dead_letter:<reason>` or `abandoned`.
        replay_count (int): Replays before this budget.
        started_at (datetime.datetime): When it started.
        takeover (int): 0, or the n-th takeover.
        error (None | str | Unset): Error text.
        location (None | str | Unset): `Location` of a 3xx answer (never followed).
        next_attempt_due_at (datetime.datetime | None | Unset): When the next attempt is due (a retry): the attempt's
            end plus its wait at the
            deployment's time scale (local mode runs the schedule faster).
        next_wait_seconds (int | None | Unset): Wait before the next attempt as the schedule says it, seconds (a retry).
        response_excerpt (None | str | Unset): First bytes of the answer's body (failures only).
        status (int | None | Unset): HTTP status.
    """

    attempt: int
    endpoint_id: str
    excerpt_truncated: bool
    latency_ms: int
    outcome: str
    replay_count: int
    started_at: datetime.datetime
    takeover: int
    error: None | str | Unset = UNSET
    location: None | str | Unset = UNSET
    next_attempt_due_at: datetime.datetime | None | Unset = UNSET
    next_wait_seconds: int | None | Unset = UNSET
    response_excerpt: None | str | Unset = UNSET
    status: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        attempt = self.attempt

        endpoint_id = self.endpoint_id

        excerpt_truncated = self.excerpt_truncated

        latency_ms = self.latency_ms

        outcome = self.outcome

        replay_count = self.replay_count

        started_at = self.started_at.isoformat()

        takeover = self.takeover

        error: None | str | Unset
        if isinstance(self.error, Unset):
            error = UNSET
        else:
            error = self.error

        location: None | str | Unset
        if isinstance(self.location, Unset):
            location = UNSET
        else:
            location = self.location

        next_attempt_due_at: None | str | Unset
        if isinstance(self.next_attempt_due_at, Unset):
            next_attempt_due_at = UNSET
        elif isinstance(self.next_attempt_due_at, datetime.datetime):
            next_attempt_due_at = self.next_attempt_due_at.isoformat()
        else:
            next_attempt_due_at = self.next_attempt_due_at

        next_wait_seconds: int | None | Unset
        if isinstance(self.next_wait_seconds, Unset):
            next_wait_seconds = UNSET
        else:
            next_wait_seconds = self.next_wait_seconds

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
                "excerpt_truncated": excerpt_truncated,
                "latency_ms": latency_ms,
                "outcome": outcome,
                "replay_count": replay_count,
                "started_at": started_at,
                "takeover": takeover,
            }
        )
        if error is not UNSET:
            field_dict["error"] = error
        if location is not UNSET:
            field_dict["location"] = location
        if next_attempt_due_at is not UNSET:
            field_dict["next_attempt_due_at"] = next_attempt_due_at
        if next_wait_seconds is not UNSET:
            field_dict["next_wait_seconds"] = next_wait_seconds
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

        excerpt_truncated = d.pop("excerpt_truncated")

        latency_ms = d.pop("latency_ms")

        outcome = d.pop("outcome")

        replay_count = d.pop("replay_count")

        started_at = datetime.datetime.fromisoformat(d.pop("started_at"))

        takeover = d.pop("takeover")

        def _parse_error(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        error = _parse_error(d.pop("error", UNSET))

        def _parse_location(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        location = _parse_location(d.pop("location", UNSET))

        def _parse_next_attempt_due_at(
            data: object,
        ) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                next_attempt_due_at_type_0 = datetime.datetime.fromisoformat(data)

                return next_attempt_due_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        next_attempt_due_at = _parse_next_attempt_due_at(
            d.pop("next_attempt_due_at", UNSET)
        )

        def _parse_next_wait_seconds(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        next_wait_seconds = _parse_next_wait_seconds(d.pop("next_wait_seconds", UNSET))

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

        attempt = cls(
            attempt=attempt,
            endpoint_id=endpoint_id,
            excerpt_truncated=excerpt_truncated,
            latency_ms=latency_ms,
            outcome=outcome,
            replay_count=replay_count,
            started_at=started_at,
            takeover=takeover,
            error=error,
            location=location,
            next_attempt_due_at=next_attempt_due_at,
            next_wait_seconds=next_wait_seconds,
            response_excerpt=response_excerpt,
            status=status,
        )

        attempt.additional_properties = d
        return attempt

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
