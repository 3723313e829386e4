from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="TestSend")


@_attrs_define
class TestSend:
    """What a receiver did with a test event.

    Attributes:
        delivered (bool): True for a 2xx answer.
        event_id (str): The test event's id (its `webhook-id`).
        event_type (str): `tern.test`.
        excerpt_truncated (bool): True when the body was longer than the excerpt.
        latency_ms (int): Start to end of the answer (or the error), milliseconds.
        error (None | str | Unset): Error text.
        error_class (None | str | Unset): Error class when there was no usable answer (`timeout`, `connect`, `blocked`,
            ...).
        response_excerpt (None | str | Unset): First bytes of the answer's body.
        status (int | None | Unset): HTTP status, when the receiver answered.
    """

    delivered: bool
    event_id: str
    event_type: str
    excerpt_truncated: bool
    latency_ms: int
    error: None | str | Unset = UNSET
    error_class: None | str | Unset = UNSET
    response_excerpt: None | str | Unset = UNSET
    status: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        delivered = self.delivered

        event_id = self.event_id

        event_type = self.event_type

        excerpt_truncated = self.excerpt_truncated

        latency_ms = self.latency_ms

        error: None | str | Unset
        if isinstance(self.error, Unset):
            error = UNSET
        else:
            error = self.error

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
                "delivered": delivered,
                "event_id": event_id,
                "event_type": event_type,
                "excerpt_truncated": excerpt_truncated,
                "latency_ms": latency_ms,
            }
        )
        if error is not UNSET:
            field_dict["error"] = error
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
        delivered = d.pop("delivered")

        event_id = d.pop("event_id")

        event_type = d.pop("event_type")

        excerpt_truncated = d.pop("excerpt_truncated")

        latency_ms = d.pop("latency_ms")

        def _parse_error(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        error = _parse_error(d.pop("error", UNSET))

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

        test_send = cls(
            delivered=delivered,
            event_id=event_id,
            event_type=event_type,
            excerpt_truncated=excerpt_truncated,
            latency_ms=latency_ms,
            error=error,
            error_class=error_class,
            response_excerpt=response_excerpt,
            status=status,
        )

        test_send.additional_properties = d
        return test_send

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
