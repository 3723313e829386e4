from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.payload_format import PayloadFormat
from ..types import UNSET, Unset

T = TypeVar("T", bound="EndpointPatch")


@_attrs_define
class EndpointPatch:
    """A change to an endpoint: only the fields present change. `null` returns an optional
    setting to its default.

        Attributes:
            client_certificate_arn (None | str | Unset): New client certificate secret (ARN, name under the tenant's own
                `tern/mtls/<tenant_id>/`) for mutual TLS; `null` removes it.
            description (None | str | Unset): New description; `null` removes it.
            event_types (list[str] | None | Unset): New subscriptions.
            max_attempts (int | None | Unset): New attempt budget, at least 1; `null`: the schedule's length + 1.
            max_per_second (int | None | Unset): New rate limit, requests per second, 1..=1,000; `null` removes the limit.
            payload_format (None | PayloadFormat | Unset):
            schedule_seconds (list[int] | None | Unset): New retry waits, seconds (at most 50, each 1 to 604,800); `null`:
                the deployment's
                schedule.
            timeout_ms (int | None | Unset): New attempt deadline, milliseconds, 1,000..=30,000; `null`: the deployment's.
            url (None | str | Unset): New receiver URL (checked as at creation).
    """

    client_certificate_arn: None | str | Unset = UNSET
    description: None | str | Unset = UNSET
    event_types: list[str] | None | Unset = UNSET
    max_attempts: int | None | Unset = UNSET
    max_per_second: int | None | Unset = UNSET
    payload_format: None | PayloadFormat | Unset = UNSET
    schedule_seconds: list[int] | None | Unset = UNSET
    timeout_ms: int | None | Unset = UNSET
    url: None | str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        client_certificate_arn: None | str | Unset
        if isinstance(self.client_certificate_arn, Unset):
            client_certificate_arn = UNSET
        else:
            client_certificate_arn = self.client_certificate_arn

        description: None | str | Unset
        if isinstance(self.description, Unset):
            description = UNSET
        else:
            description = self.description

        event_types: list[str] | None | Unset
        if isinstance(self.event_types, Unset):
            event_types = UNSET
        elif isinstance(self.event_types, list):
            event_types = self.event_types

        else:
            event_types = self.event_types

        max_attempts: int | None | Unset
        if isinstance(self.max_attempts, Unset):
            max_attempts = UNSET
        else:
            max_attempts = self.max_attempts

        max_per_second: int | None | Unset
        if isinstance(self.max_per_second, Unset):
            max_per_second = UNSET
        else:
            max_per_second = self.max_per_second

        payload_format: None | str | Unset
        if isinstance(self.payload_format, Unset):
            payload_format = UNSET
        elif isinstance(self.payload_format, PayloadFormat):
            payload_format = self.payload_format.value
        else:
            payload_format = self.payload_format

        schedule_seconds: list[int] | None | Unset
        if isinstance(self.schedule_seconds, Unset):
            schedule_seconds = UNSET
        elif isinstance(self.schedule_seconds, list):
            schedule_seconds = self.schedule_seconds

        else:
            schedule_seconds = self.schedule_seconds

        timeout_ms: int | None | Unset
        if isinstance(self.timeout_ms, Unset):
            timeout_ms = UNSET
        else:
            timeout_ms = self.timeout_ms

        url: None | str | Unset
        if isinstance(self.url, Unset):
            url = UNSET
        else:
            url = self.url

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if client_certificate_arn is not UNSET:
            field_dict["client_certificate_arn"] = client_certificate_arn
        if description is not UNSET:
            field_dict["description"] = description
        if event_types is not UNSET:
            field_dict["event_types"] = event_types
        if max_attempts is not UNSET:
            field_dict["max_attempts"] = max_attempts
        if max_per_second is not UNSET:
            field_dict["max_per_second"] = max_per_second
        if payload_format is not UNSET:
            field_dict["payload_format"] = payload_format
        if schedule_seconds is not UNSET:
            field_dict["schedule_seconds"] = schedule_seconds
        if timeout_ms is not UNSET:
            field_dict["timeout_ms"] = timeout_ms
        if url is not UNSET:
            field_dict["url"] = url

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)

        def _parse_client_certificate_arn(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        client_certificate_arn = _parse_client_certificate_arn(
            d.pop("client_certificate_arn", UNSET)
        )

        def _parse_description(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        description = _parse_description(d.pop("description", UNSET))

        def _parse_event_types(data: object) -> list[str] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                event_types_type_0 = cast(list[str], data)

                return event_types_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[str] | None | Unset, data)

        event_types = _parse_event_types(d.pop("event_types", UNSET))

        def _parse_max_attempts(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_attempts = _parse_max_attempts(d.pop("max_attempts", UNSET))

        def _parse_max_per_second(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_per_second = _parse_max_per_second(d.pop("max_per_second", UNSET))

        def _parse_payload_format(data: object) -> None | PayloadFormat | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                payload_format_type_0 = PayloadFormat(data)

                return payload_format_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | PayloadFormat | Unset, data)

        payload_format = _parse_payload_format(d.pop("payload_format", UNSET))

        def _parse_schedule_seconds(data: object) -> list[int] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                schedule_seconds_type_0 = cast(list[int], data)

                return schedule_seconds_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[int] | None | Unset, data)

        schedule_seconds = _parse_schedule_seconds(d.pop("schedule_seconds", UNSET))

        def _parse_timeout_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        timeout_ms = _parse_timeout_ms(d.pop("timeout_ms", UNSET))

        def _parse_url(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        url = _parse_url(d.pop("url", UNSET))

        endpoint_patch = cls(
            client_certificate_arn=client_certificate_arn,
            description=description,
            event_types=event_types,
            max_attempts=max_attempts,
            max_per_second=max_per_second,
            payload_format=payload_format,
            schedule_seconds=schedule_seconds,
            timeout_ms=timeout_ms,
            url=url,
        )

        return endpoint_patch
