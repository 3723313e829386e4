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


T = TypeVar("T", bound="EndpointPatch")


@_attrs_define
class EndpointPatch:
    """A change to an endpoint: only the fields present change. `null` returns an optional
    setting to its default.

        Attributes:
            auth (AuthBasic | AuthBearer | AuthNone | AuthOauth2ClientCredentials | None | Unset):
            client_certificate_arn (None | str | Unset): New client certificate secret (ARN, name under the tenant's own
                `tern/mtls/<tenant_id>/`) for mutual TLS; `null` removes it.
            description (None | str | Unset): New description (at most 1,024 bytes, no control characters); `null` removes
                it.
            event_types (list[str] | None | Unset): New subscriptions.
            headers (list[CustomHeaderSetting] | None | Unset): New custom headers: the whole list, replacing the stored one
                (a header left out is
                removed; `[]` or `null` removes them all; at most 20). A secret entry without a
                `value` keeps the stored value of the secret header of that name.
            max_attempts (int | None | Unset): New attempt budget, at least 1; `null`: the schedule's length + 1.
            max_per_second (int | None | Unset): New rate limit, requests per second, 1..=1,000; `null` removes the limit.
            payload_format (None | PayloadFormat | Unset):
            schedule_seconds (list[int] | None | Unset): New retry waits, seconds (at most 50, each 1 to 604,800); `null`:
                the deployment's
                schedule.
            send_traceparent (bool | None | Unset): Send each attempt's W3C `traceparent` header, or stop sending it.
            signatures (None | Signatures | Unset):
            timeout_ms (int | None | Unset): New attempt deadline, milliseconds, 1,000..=30,000; `null`: the deployment's.
            url (None | str | Unset): New receiver URL (checked as at creation; at most 2,048 bytes).
    """

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
    url: None | str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.auth_basic import AuthBasic
        from ..models.auth_bearer import AuthBearer
        from ..models.auth_none import AuthNone
        from ..models.auth_oauth_2_client_credentials import AuthOauth2ClientCredentials

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

        url: None | str | Unset
        if isinstance(self.url, Unset):
            url = UNSET
        else:
            url = self.url

        field_dict: dict[str, Any] = {}

        field_dict.update({})
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
        if url is not UNSET:
            field_dict["url"] = url

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.auth_basic import AuthBasic
        from ..models.auth_bearer import AuthBearer
        from ..models.auth_none import AuthNone
        from ..models.auth_oauth_2_client_credentials import AuthOauth2ClientCredentials
        from ..models.custom_header_setting import CustomHeaderSetting

        d = dict(src_dict)

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

        def _parse_url(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        url = _parse_url(d.pop("url", UNSET))

        endpoint_patch = cls(
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
            url=url,
        )

        return endpoint_patch
