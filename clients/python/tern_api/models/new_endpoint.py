from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.payload_format import PayloadFormat
from ..types import UNSET, Unset

T = TypeVar("T", bound="NewEndpoint")


@_attrs_define
class NewEndpoint:
    """A new endpoint.

    Example:
        {'description': "Acme's order hook", 'event_types': ['order.paid'], 'url':
            'https://receiver.example.com/webhooks'}

    Attributes:
        url (str): Receiver URL: `https://` (plain `http://` only where the deployment allows it), at
            most 2,048 bytes, no credentials; its host must not resolve to a private, loopback
            or metadata address (the SSRF guard).
        client_certificate_arn (None | str | Unset): Mutual TLS: the ARN of the Secrets Manager secret holding the
            client certificate
            chain (leaf first) and its private key as PEM text; its name must start with the
            tenant's own prefix, `tern/mtls/<tenant_id>/` (another tenant's secret is refused,
            whether or not it exists). Offered to a receiver that asks for a client
            certificate. Default: none.
        description (None | str | Unset): Free text.
        event_types (list[str] | None | Unset): Event types delivered (`*`: all of the tenant's own types). Default
            `["*"]`.
        max_attempts (int | None | Unset): Attempt budget, at least 1 (capped at the schedule's length + 1); default:
            the
            schedule's length + 1.
        max_per_second (int | None | Unset): Rate limit: at most this many requests per second to the receiver, across
            every
            sender batch, 1..=1,000 (`tern_core::rate_limit::MAX_PER_SECOND`); deliveries over
            it wait on the queue without spending an attempt. Default: no limit.
        payload_format (None | PayloadFormat | Unset):
        schedule_seconds (list[int] | None | Unset): Waits before each retry, seconds (at most 50 of them,
            `tern_core::retry::MAX_SCHEDULE_LEN`,
            each 1 to 604,800: a week; jitter of 0-10 % is added); default: the deployment's
            schedule.
        timeout_ms (int | None | Unset): Attempt deadline, milliseconds, 1,000..=30,000
            (`tern_core::endpoint::MIN_TIMEOUT_MS`,
            `MAX_TIMEOUT_MS`); default: the deployment's.
    """

    url: str
    client_certificate_arn: None | str | Unset = UNSET
    description: None | str | Unset = UNSET
    event_types: list[str] | None | Unset = UNSET
    max_attempts: int | None | Unset = UNSET
    max_per_second: int | None | Unset = UNSET
    payload_format: None | PayloadFormat | Unset = UNSET
    schedule_seconds: list[int] | None | Unset = UNSET
    timeout_ms: int | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        url = self.url

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

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "url": url,
            }
        )
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

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        url = d.pop("url")

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

        new_endpoint = cls(
            url=url,
            client_certificate_arn=client_certificate_arn,
            description=description,
            event_types=event_types,
            max_attempts=max_attempts,
            max_per_second=max_per_second,
            payload_format=payload_format,
            schedule_seconds=schedule_seconds,
            timeout_ms=timeout_ms,
        )

        return new_endpoint
