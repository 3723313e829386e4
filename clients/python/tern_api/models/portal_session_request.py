from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="PortalSessionRequest")


@_attrs_define
class PortalSessionRequest:
    """A customer portal session to mint for one tenant.

    Example:
        {'brand_color': '#0b5fff', 'endpoint_ids': ['ep_01H...'], 'expires_in_seconds': 3600, 'read_only': False}

    Attributes:
        brand_color (None | str | Unset): Brand colour of the portal's header and buttons, `#rrggbb`.
        endpoint_ids (list[str] | None | Unset): Limit the session to these endpoints of the tenant (1 to 20,
            `tern_core::portal::MAX_SESSION_ENDPOINTS`; each must exist). By default it sees all
            of them and may add new ones.
        event_types (list[str] | None | Unset): Event types the application sends, offered as choices when the customer
            adds an
            endpoint (at most 50), besides the types its endpoints already subscribe to.
        expires_in_seconds (int | None | Unset): Life of the link and of the session it opens, seconds: 60 to 86,400,
            default 3,600
            (`tern_core::portal::MIN_SESSION_SECONDS`, `MAX_SESSION_SECONDS`).
        logo_url (None | str | Unset): Logo shown in the header: an `https` URL of at most 512 bytes (the portal's CSP
            allows images from its origin only).
        read_only (bool | Unset): No change of any kind and no secret shown. Default `false`.
    """

    brand_color: None | str | Unset = UNSET
    endpoint_ids: list[str] | None | Unset = UNSET
    event_types: list[str] | None | Unset = UNSET
    expires_in_seconds: int | None | Unset = UNSET
    logo_url: None | str | Unset = UNSET
    read_only: bool | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        brand_color: None | str | Unset
        if isinstance(self.brand_color, Unset):
            brand_color = UNSET
        else:
            brand_color = self.brand_color

        endpoint_ids: list[str] | None | Unset
        if isinstance(self.endpoint_ids, Unset):
            endpoint_ids = UNSET
        elif isinstance(self.endpoint_ids, list):
            endpoint_ids = self.endpoint_ids

        else:
            endpoint_ids = self.endpoint_ids

        event_types: list[str] | None | Unset
        if isinstance(self.event_types, Unset):
            event_types = UNSET
        elif isinstance(self.event_types, list):
            event_types = self.event_types

        else:
            event_types = self.event_types

        expires_in_seconds: int | None | Unset
        if isinstance(self.expires_in_seconds, Unset):
            expires_in_seconds = UNSET
        else:
            expires_in_seconds = self.expires_in_seconds

        logo_url: None | str | Unset
        if isinstance(self.logo_url, Unset):
            logo_url = UNSET
        else:
            logo_url = self.logo_url

        read_only = self.read_only

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if brand_color is not UNSET:
            field_dict["brand_color"] = brand_color
        if endpoint_ids is not UNSET:
            field_dict["endpoint_ids"] = endpoint_ids
        if event_types is not UNSET:
            field_dict["event_types"] = event_types
        if expires_in_seconds is not UNSET:
            field_dict["expires_in_seconds"] = expires_in_seconds
        if logo_url is not UNSET:
            field_dict["logo_url"] = logo_url
        if read_only is not UNSET:
            field_dict["read_only"] = read_only

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)

        def _parse_brand_color(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        brand_color = _parse_brand_color(d.pop("brand_color", UNSET))

        def _parse_endpoint_ids(data: object) -> list[str] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                endpoint_ids_type_0 = cast(list[str], data)

                return endpoint_ids_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[str] | None | Unset, data)

        endpoint_ids = _parse_endpoint_ids(d.pop("endpoint_ids", UNSET))

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

        def _parse_expires_in_seconds(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        expires_in_seconds = _parse_expires_in_seconds(
            d.pop("expires_in_seconds", UNSET)
        )

        def _parse_logo_url(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        logo_url = _parse_logo_url(d.pop("logo_url", UNSET))

        read_only = d.pop("read_only", UNSET)

        portal_session_request = cls(
            brand_color=brand_color,
            endpoint_ids=endpoint_ids,
            event_types=event_types,
            expires_in_seconds=expires_in_seconds,
            logo_url=logo_url,
            read_only=read_only,
        )

        return portal_session_request
