from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="CustomHeaderSetting")


@_attrs_define
class CustomHeaderSetting:
    """A custom header to send with every attempt, as a create or a PATCH gives it.

    Names are case-insensitive (stored lowercase) RFC 9110 §5.6.2 tokens of 1-64 bytes.
    Refused names: Tern's own (`webhook-*`, `idempotency-key`, `x-webhook-signature`,
    `user-agent`, `content-type`: a receiver must be able to trust them), those the client
    sets from the URL and the body (`host`, `content-length`, `content-encoding`,
    `transfer-encoding`, `expect`), hop-by-hop ones (`connection`, `keep-alive`,
    `proxy-connection`, `te`, `trailer`, `upgrade`, `http2-settings`,
    `proxy-authorization`, `proxy-authenticate`), and `authorization` when the endpoint has
    an `auth` of its own. At most 20 headers, 4,096 bytes of names and values together.

        Example:
            {'name': 'X-Api-Key', 'secret': True, 'value': 'k-7Hq2...'}

        Attributes:
            name (str): The header's name: an RFC 9110 token of 1-64 bytes (letters, digits and
                ``!#$%&'*+-.^_`|~``), not one of the refused names.
            secret (bool | Unset): True for a value that is never shown again (an API key): kept like a signing
                secret, sent marked sensitive, never logged; answers show it as `value: null`.
            value (None | str | Unset): The value: at most 2,048 bytes of visible ASCII, spaces and tabs inside only (RFC
                9110 §5.5, no line breaks). Required, but for a secret header in a PATCH: left out
                (or `null`) there, the stored value of the secret header of this name is kept.
    """

    name: str
    secret: bool | Unset = UNSET
    value: None | str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        secret = self.secret

        value: None | str | Unset
        if isinstance(self.value, Unset):
            value = UNSET
        else:
            value = self.value

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "name": name,
            }
        )
        if secret is not UNSET:
            field_dict["secret"] = secret
        if value is not UNSET:
            field_dict["value"] = value

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        name = d.pop("name")

        secret = d.pop("secret", UNSET)

        def _parse_value(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        value = _parse_value(d.pop("value", UNSET))

        custom_header_setting = cls(
            name=name,
            secret=secret,
            value=value,
        )

        return custom_header_setting
