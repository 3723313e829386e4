from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.payload_format import PayloadFormat
from ..models.signatures import Signatures
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.auth_basic import AuthBasic
    from ..models.auth_bearer import AuthBearer
    from ..models.auth_none import AuthNone
    from ..models.auth_oauth_2_client_credentials import AuthOauth2ClientCredentials
    from ..models.custom_header_setting import CustomHeaderSetting


T = TypeVar("T", bound="NewEndpoint")


@_attrs_define
class NewEndpoint:
    """A new endpoint.

    Example:
        {'description': "Acme's order hook", 'event_types': ['order.paid'], 'url':
            'https://receiver.example.com/webhooks'}

    Attributes:
        url (str): Receiver URL: `https://` (plain `http://` only where the deployment allows it), at
            most 2,048 bytes (`tern_core::endpoint::MAX_URL_LEN`), no credentials; its host must
            not resolve to a private, loopback or metadata address (the SSRF guard).
        auth (AuthBasic | AuthBearer | AuthNone | AuthOauth2ClientCredentials | None | Unset):
        client_certificate_arn (None | str | Unset): Mutual TLS: the ARN of the Secrets Manager secret holding the
            client certificate
            chain (leaf first) and its private key as PEM text; its name must start with the
            tenant's own prefix, `tern/mtls/<tenant_id>/` (another tenant's secret is refused,
            whether or not it exists). Offered to a receiver that asks for a client
            certificate. Default: none.
        description (None | str | Unset): Free text: at most 1,024 bytes (`tern_core::sqs_text::MAX_TEXT_BYTES`), no
            control
            characters.
        event_types (list[str] | None | Unset): Event types delivered (`*`: all of the tenant's own types). Default
            `["*"]`.
        headers (list[CustomHeaderSetting] | None | Unset): Custom headers sent with every attempt (at most 20,
            `tern_core::custom_headers::MAX_CUSTOM_HEADERS`; 4,096 bytes together). Secret ones
            are never shown again. Default: none.
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
        send_traceparent (bool | None | Unset): True to send each attempt's W3C Trace Context `traceparent` header (the
            attempt
            span's when Tern traces, else the published event's), so a receiver that traces
            sees the delivery as the parent of its own work. Default: false.
        signatures (None | Signatures | Unset):
        timeout_ms (int | None | Unset): Attempt deadline, milliseconds, 1,000..=30,000
            (`tern_core::endpoint::MIN_TIMEOUT_MS`,
            `MAX_TIMEOUT_MS`); default: the deployment's.
    """

    url: str
    auth: (
        AuthBasic | AuthBearer | AuthNone | AuthOauth2ClientCredentials | None | Unset
    ) = UNSET
    client_certificate_arn: None | str | Unset = UNSET
    description: None | str | Unset = UNSET
    event_types: list[str] | None | Unset = UNSET
    headers: list[CustomHeaderSetting] | None | Unset = UNSET
    max_attempts: int | None | Unset = UNSET
    max_per_second: int | None | Unset = UNSET
    payload_format: None | PayloadFormat | Unset = UNSET
    schedule_seconds: list[int] | None | Unset = UNSET
    send_traceparent: bool | None | Unset = UNSET
    signatures: None | Signatures | Unset = UNSET
    timeout_ms: int | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.auth_basic import AuthBasic
        from ..models.auth_bearer import AuthBearer
        from ..models.auth_none import AuthNone
        from ..models.auth_oauth_2_client_credentials import AuthOauth2ClientCredentials

        url = self.url

        auth: dict[str, Any] | None | Unset
        if isinstance(self.auth, Unset):
            auth = UNSET
        elif (
            isinstance(self.auth, AuthNone)
            or isinstance(self.auth, AuthBasic)
            or isinstance(self.auth, AuthBearer)
            or isinstance(self.auth, AuthOauth2ClientCredentials)
        ):
            auth = self.auth.to_dict()
        else:
            auth = self.auth

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

        headers: list[dict[str, Any]] | None | Unset
        if isinstance(self.headers, Unset):
            headers = UNSET
        elif isinstance(self.headers, list):
            headers = []
            for headers_type_0_item_data in self.headers:
                headers_type_0_item = headers_type_0_item_data.to_dict()
                headers.append(headers_type_0_item)

        else:
            headers = self.headers

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

        send_traceparent: bool | None | Unset
        if isinstance(self.send_traceparent, Unset):
            send_traceparent = UNSET
        else:
            send_traceparent = self.send_traceparent

        signatures: None | str | Unset
        if isinstance(self.signatures, Unset):
            signatures = UNSET
        elif isinstance(self.signatures, Signatures):
            signatures = self.signatures.value
        else:
            signatures = self.signatures

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
        if auth is not UNSET:
            field_dict["auth"] = auth
        if client_certificate_arn is not UNSET:
            field_dict["client_certificate_arn"] = client_certificate_arn
        if description is not UNSET:
            field_dict["description"] = description
        if event_types is not UNSET:
            field_dict["event_types"] = event_types
        if headers is not UNSET:
            field_dict["headers"] = headers
        if max_attempts is not UNSET:
            field_dict["max_attempts"] = max_attempts
        if max_per_second is not UNSET:
            field_dict["max_per_second"] = max_per_second
        if payload_format is not UNSET:
            field_dict["payload_format"] = payload_format
        if schedule_seconds is not UNSET:
            field_dict["schedule_seconds"] = schedule_seconds
        if send_traceparent is not UNSET:
            field_dict["send_traceparent"] = send_traceparent
        if signatures is not UNSET:
            field_dict["signatures"] = signatures
        if timeout_ms is not UNSET:
            field_dict["timeout_ms"] = timeout_ms

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.auth_basic import AuthBasic
        from ..models.auth_bearer import AuthBearer
        from ..models.auth_none import AuthNone
        from ..models.auth_oauth_2_client_credentials import AuthOauth2ClientCredentials
        from ..models.custom_header_setting import CustomHeaderSetting

        d = dict(src_dict)
        url = d.pop("url")

        def _parse_auth(
            data: object,
        ) -> (
            AuthBasic
            | AuthBearer
            | AuthNone
            | AuthOauth2ClientCredentials
            | None
            | Unset
        ):
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                componentsschemas_receiver_auth_setting_type_0 = AuthNone.from_dict(
                    data
                )

                return componentsschemas_receiver_auth_setting_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                componentsschemas_receiver_auth_setting_type_1 = AuthBasic.from_dict(
                    data
                )

                return componentsschemas_receiver_auth_setting_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                componentsschemas_receiver_auth_setting_type_2 = AuthBearer.from_dict(
                    data
                )

                return componentsschemas_receiver_auth_setting_type_2
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                componentsschemas_receiver_auth_setting_type_3 = (
                    AuthOauth2ClientCredentials.from_dict(data)
                )

                return componentsschemas_receiver_auth_setting_type_3
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(
                AuthBasic
                | AuthBearer
                | AuthNone
                | AuthOauth2ClientCredentials
                | None
                | Unset,
                data,
            )

        auth = _parse_auth(d.pop("auth", UNSET))

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

        def _parse_headers(data: object) -> list[CustomHeaderSetting] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                headers_type_0 = []
                _headers_type_0 = data
                for headers_type_0_item_data in _headers_type_0:
                    headers_type_0_item = CustomHeaderSetting.from_dict(
                        headers_type_0_item_data
                    )

                    headers_type_0.append(headers_type_0_item)

                return headers_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[CustomHeaderSetting] | None | Unset, data)

        headers = _parse_headers(d.pop("headers", UNSET))

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

        def _parse_send_traceparent(data: object) -> bool | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(bool | None | Unset, data)

        send_traceparent = _parse_send_traceparent(d.pop("send_traceparent", UNSET))

        def _parse_signatures(data: object) -> None | Signatures | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                signatures_type_0 = Signatures(data)

                return signatures_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | Signatures | Unset, data)

        signatures = _parse_signatures(d.pop("signatures", UNSET))

        def _parse_timeout_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        timeout_ms = _parse_timeout_ms(d.pop("timeout_ms", UNSET))

        new_endpoint = cls(
            url=url,
            auth=auth,
            client_certificate_arn=client_certificate_arn,
            description=description,
            event_types=event_types,
            headers=headers,
            max_attempts=max_attempts,
            max_per_second=max_per_second,
            payload_format=payload_format,
            schedule_seconds=schedule_seconds,
            send_traceparent=send_traceparent,
            signatures=signatures,
            timeout_ms=timeout_ms,
        )

        return new_endpoint
