from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="PublishedEvent")


@_attrs_define
class PublishedEvent:
    """A published event.

    Attributes:
        created (bool): False when this was a repeat of an earlier publish (nothing written).
        created_at (datetime.datetime): When it was first published.
        id (str): Event id.
        tenant_id (str): Tenant.
        type_ (str): Event type.
    """

    created: bool
    created_at: datetime.datetime
    id: str
    tenant_id: str
    type_: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        created = self.created

        created_at = self.created_at.isoformat()

        id = self.id

        tenant_id = self.tenant_id

        type_ = self.type_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "created": created,
                "created_at": created_at,
                "id": id,
                "tenant_id": tenant_id,
                "type": type_,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        created = d.pop("created")

        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        id = d.pop("id")

        tenant_id = d.pop("tenant_id")

        type_ = d.pop("type")

        published_event = cls(
            created=created,
            created_at=created_at,
            id=id,
            tenant_id=tenant_id,
            type_=type_,
        )

        published_event.additional_properties = d
        return published_event

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
