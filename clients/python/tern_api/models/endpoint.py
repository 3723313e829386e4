from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.payload_format import PayloadFormat
from ..models.signatures import Signatures
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.custom_header import CustomHeader
    from ..models.receiver_auth_view import ReceiverAuthView
    from ..models.secret_info import SecretInfo
    from ..models.signing_key_info import SigningKeyInfo


T = TypeVar("T", bound="Endpoint")


@_attrs_define
class Endpoint:
    """An endpoint. Its secrets appear as fingerprints only.

    Attributes:
        auth (ReceiverAuthView): An endpoint's authentication as answered: every setting but its secret, which is only
            named (`secret`).
        created_at (datetime.datetime): When it was created.
        enabled (bool): False when disabled.
        event_types (list[str]): Subscribed event types.
        headers (list[CustomHeader]): Custom headers; a secret one's value is `null`.
        id (str): Endpoint id (`ep_...`).
        payload_format (PayloadFormat): Request body format of an endpoint.
        secrets (list[SecretInfo]): Signing secrets, newest first (fingerprints).
        send_traceparent (bool): True when each attempt carries the W3C `traceparent` header.
        signatures (Signatures): Which signature schemes `webhook-signature` carries.
        signing_keys (list[SigningKeyInfo]): Ed25519 signing keys for `v1a`, newest first, by their public keys (what
            the
            receiver verifies with; none until `v1a` is first turned on or a key is rotated in).
        tenant_id (str): Owning tenant.
        url (str): Receiver URL.
        client_certificate_arn (None | str | Unset): Mutual TLS: the Secrets Manager secret (ARN) of its client
            certificate; `null`
            for none. The certificate and key themselves are never read by the API.
        description (None | str | Unset): Free text.
        disabled_at (datetime.datetime | None | Unset): When it was disabled.
        disabled_reason (None | str | Unset): Why it is disabled.
        last_disabled_at (datetime.datetime | None | Unset): When it was disabled before it was last enabled again.
        last_disabled_reason (None | str | Unset): The reason it had when it was last enabled again.
        max_attempts (int | None | Unset): Attempt budget; `null`: the schedule's length + 1.
        max_per_second (int | None | Unset): Rate limit, requests per second across every sender batch; `null`: no
            limit.
        schedule_seconds (list[int] | None | Unset): Waits before each retry, seconds; `null`: the deployment's
            schedule.
        timeout_ms (int | None | Unset): Attempt deadline, milliseconds; `null`: the deployment's.
        updated_at (datetime.datetime | None | Unset): When its settings last changed.
    """

    auth: ReceiverAuthView
    created_at: datetime.datetime
    enabled: bool
    event_types: list[str]
    headers: list[CustomHeader]
    id: str
    payload_format: PayloadFormat
    secrets: list[SecretInfo]
    send_traceparent: bool
    signatures: Signatures
    signing_keys: list[SigningKeyInfo]
    tenant_id: str
    url: str
    client_certificate_arn: None | str | Unset = UNSET
    description: None | str | Unset = UNSET
    disabled_at: datetime.datetime | None | Unset = UNSET
    disabled_reason: None | str | Unset = UNSET
    last_disabled_at: datetime.datetime | None | Unset = UNSET
    last_disabled_reason: None | str | Unset = UNSET
    max_attempts: int | None | Unset = UNSET
    max_per_second: int | None | Unset = UNSET
    schedule_seconds: list[int] | None | Unset = UNSET
    timeout_ms: int | None | Unset = UNSET
    updated_at: datetime.datetime | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        auth = self.auth.to_dict()

        created_at = self.created_at.isoformat()

        enabled = self.enabled

        event_types = self.event_types

        headers = []
        for headers_item_data in self.headers:
            headers_item = headers_item_data.to_dict()
            headers.append(headers_item)

        id = self.id

        payload_format = self.payload_format.value

        secrets = []
        for secrets_item_data in self.secrets:
            secrets_item = secrets_item_data.to_dict()
            secrets.append(secrets_item)

        send_traceparent = self.send_traceparent

        signatures = self.signatures.value

        signing_keys = []
        for signing_keys_item_data in self.signing_keys:
            signing_keys_item = signing_keys_item_data.to_dict()
            signing_keys.append(signing_keys_item)

        tenant_id = self.tenant_id

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

        disabled_at: None | str | Unset
        if isinstance(self.disabled_at, Unset):
            disabled_at = UNSET
        elif isinstance(self.disabled_at, datetime.datetime):
            disabled_at = self.disabled_at.isoformat()
        else:
            disabled_at = self.disabled_at

        disabled_reason: None | str | Unset
        if isinstance(self.disabled_reason, Unset):
            disabled_reason = UNSET
        else:
            disabled_reason = self.disabled_reason

        last_disabled_at: None | str | Unset
        if isinstance(self.last_disabled_at, Unset):
            last_disabled_at = UNSET
        elif isinstance(self.last_disabled_at, datetime.datetime):
            last_disabled_at = self.last_disabled_at.isoformat()
        else:
            last_disabled_at = self.last_disabled_at

        last_disabled_reason: None | str | Unset
        if isinstance(self.last_disabled_reason, Unset):
            last_disabled_reason = UNSET
        else:
            last_disabled_reason = self.last_disabled_reason

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

        updated_at: None | str | Unset
        if isinstance(self.updated_at, Unset):
            updated_at = UNSET
        elif isinstance(self.updated_at, datetime.datetime):
            updated_at = self.updated_at.isoformat()
        else:
            updated_at = self.updated_at

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "auth": auth,
                "created_at": created_at,
                "enabled": enabled,
                "event_types": event_types,
                "headers": headers,
                "id": id,
                "payload_format": payload_format,
                "secrets": secrets,
                "send_traceparent": send_traceparent,
                "signatures": signatures,
                "signing_keys": signing_keys,
                "tenant_id": tenant_id,
                "url": url,
            }
        )
        if client_certificate_arn is not UNSET:
            field_dict["client_certificate_arn"] = client_certificate_arn
        if description is not UNSET:
            field_dict["description"] = description
        if disabled_at is not UNSET:
            field_dict["disabled_at"] = disabled_at
        if disabled_reason is not UNSET:
            field_dict["disabled_reason"] = disabled_reason
        if last_disabled_at is not UNSET:
            field_dict["last_disabled_at"] = last_disabled_at
        if last_disabled_reason is not UNSET:
            field_dict["last_disabled_reason"] = last_disabled_reason
        if max_attempts is not UNSET:
            field_dict["max_attempts"] = max_attempts
        if max_per_second is not UNSET:
            field_dict["max_per_second"] = max_per_second
        if schedule_seconds is not UNSET:
            field_dict["schedule_seconds"] = schedule_seconds
        if timeout_ms is not UNSET:
            field_dict["timeout_ms"] = timeout_ms
        if updated_at is not UNSET:
            field_dict["updated_at"] = updated_at

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.custom_header import CustomHeader
        from ..models.receiver_auth_view import ReceiverAuthView
        from ..models.secret_info import SecretInfo
        from ..models.signing_key_info import SigningKeyInfo

        d = dict(src_dict)
        auth = ReceiverAuthView.from_dict(d.pop("auth"))

        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        enabled = d.pop("enabled")

        event_types = cast(list[str], d.pop("event_types"))

        headers = []
        _headers = d.pop("headers")
        for headers_item_data in _headers:
            headers_item = CustomHeader.from_dict(headers_item_data)

            headers.append(headers_item)

        id = d.pop("id")

        payload_format = PayloadFormat(d.pop("payload_format"))

        secrets = []
        _secrets = d.pop("secrets")
        for secrets_item_data in _secrets:
            secrets_item = SecretInfo.from_dict(secrets_item_data)

            secrets.append(secrets_item)

        send_traceparent = d.pop("send_traceparent")

        signatures = Signatures(d.pop("signatures"))

        signing_keys = []
        _signing_keys = d.pop("signing_keys")
        for signing_keys_item_data in _signing_keys:
            signing_keys_item = SigningKeyInfo.from_dict(signing_keys_item_data)

            signing_keys.append(signing_keys_item)

        tenant_id = d.pop("tenant_id")

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

        def _parse_disabled_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                disabled_at_type_0 = datetime.datetime.fromisoformat(data)

                return disabled_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        disabled_at = _parse_disabled_at(d.pop("disabled_at", UNSET))

        def _parse_disabled_reason(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        disabled_reason = _parse_disabled_reason(d.pop("disabled_reason", UNSET))

        def _parse_last_disabled_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                last_disabled_at_type_0 = datetime.datetime.fromisoformat(data)

                return last_disabled_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        last_disabled_at = _parse_last_disabled_at(d.pop("last_disabled_at", UNSET))

        def _parse_last_disabled_reason(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        last_disabled_reason = _parse_last_disabled_reason(
            d.pop("last_disabled_reason", UNSET)
        )

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

        def _parse_updated_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                updated_at_type_0 = datetime.datetime.fromisoformat(data)

                return updated_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        updated_at = _parse_updated_at(d.pop("updated_at", UNSET))

        endpoint = cls(
            auth=auth,
            created_at=created_at,
            enabled=enabled,
            event_types=event_types,
            headers=headers,
            id=id,
            payload_format=payload_format,
            secrets=secrets,
            send_traceparent=send_traceparent,
            signatures=signatures,
            signing_keys=signing_keys,
            tenant_id=tenant_id,
            url=url,
            client_certificate_arn=client_certificate_arn,
            description=description,
            disabled_at=disabled_at,
            disabled_reason=disabled_reason,
            last_disabled_at=last_disabled_at,
            last_disabled_reason=last_disabled_reason,
            max_attempts=max_attempts,
            max_per_second=max_per_second,
            schedule_seconds=schedule_seconds,
            timeout_ms=timeout_ms,
            updated_at=updated_at,
        )

        endpoint.additional_properties = d
        return endpoint

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
