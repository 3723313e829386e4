from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="PortalSession")


@_attrs_define
class PortalSession:
    """A minted portal session: open `url` once (in a browser or an iframe).

    Attributes:
        expires_at (datetime.datetime): When the link and the session end.
        session_id (str): The session's id (logged with every action of the session).
        url (str): The single-use link: `<portal>/portal/start?token=...`. Loading it spends nothing (link
            scanners fetch it first); its page's button exchanges the token for a session cookie
            and drops it from the address bar; a used link is refused.
    """

    expires_at: datetime.datetime
    session_id: str
    url: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        expires_at = self.expires_at.isoformat()

        session_id = self.session_id

        url = self.url

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "expires_at": expires_at,
                "session_id": session_id,
                "url": url,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        expires_at = datetime.datetime.fromisoformat(d.pop("expires_at"))

        session_id = d.pop("session_id")

        url = d.pop("url")

        portal_session = cls(
            expires_at=expires_at,
            session_id=session_id,
            url=url,
        )

        portal_session.additional_properties = d
        return portal_session

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
