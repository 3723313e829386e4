from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.delivery_status import DeliveryStatus
    from ..models.event_payload_type_0 import EventPayloadType0


T = TypeVar("T", bound="Event")


@_attrs_define
class Event:
    """An event and its deliveries.

    Attributes:
        deliveries (list[DeliveryStatus]): One per endpoint subscribed to it or attempted, in endpoint id order.
        id (str): Event id.
        tenant_id (str): Tenant.
        created_at (datetime.datetime | None | Unset): When it was published (`null` once the outbox no longer keeps
            it).
        payload (EventPayloadType0 | None | Unset): The payload while the outbox keeps it (7 days by default), else
            `null`.
        type_ (None | str | Unset): Event type (`null` once the outbox no longer keeps the event).
    """

    deliveries: list[DeliveryStatus]
    id: str
    tenant_id: str
    created_at: datetime.datetime | None | Unset = UNSET
    payload: EventPayloadType0 | None | Unset = UNSET
    type_: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.event_payload_type_0 import EventPayloadType0

        deliveries = []
        for deliveries_item_data in self.deliveries:
            deliveries_item = deliveries_item_data.to_dict()
            deliveries.append(deliveries_item)

        id = self.id

        tenant_id = self.tenant_id

        created_at: None | str | Unset
        if isinstance(self.created_at, Unset):
            created_at = UNSET
        elif isinstance(self.created_at, datetime.datetime):
            created_at = self.created_at.isoformat()
        else:
            created_at = self.created_at

        payload: dict[str, Any] | None | Unset
        if isinstance(self.payload, Unset):
            payload = UNSET
        elif isinstance(self.payload, EventPayloadType0):
            payload = self.payload.to_dict()
        else:
            payload = self.payload

        type_: None | str | Unset
        if isinstance(self.type_, Unset):
            type_ = UNSET
        else:
            type_ = self.type_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "deliveries": deliveries,
                "id": id,
                "tenant_id": tenant_id,
            }
        )
        if created_at is not UNSET:
            field_dict["created_at"] = created_at
        if payload is not UNSET:
            field_dict["payload"] = payload
        if type_ is not UNSET:
            field_dict["type"] = type_

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.delivery_status import DeliveryStatus
        from ..models.event_payload_type_0 import EventPayloadType0

        d = dict(src_dict)
        deliveries = []
        _deliveries = d.pop("deliveries")
        for deliveries_item_data in _deliveries:
            deliveries_item = DeliveryStatus.from_dict(deliveries_item_data)

            deliveries.append(deliveries_item)

        id = d.pop("id")

        tenant_id = d.pop("tenant_id")

        def _parse_created_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                created_at_type_0 = datetime.datetime.fromisoformat(data)

                return created_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        created_at = _parse_created_at(d.pop("created_at", UNSET))

        def _parse_payload(data: object) -> EventPayloadType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                payload_type_0 = EventPayloadType0.from_dict(data)

                return payload_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(EventPayloadType0 | None | Unset, data)

        payload = _parse_payload(d.pop("payload", UNSET))

        def _parse_type_(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        type_ = _parse_type_(d.pop("type", UNSET))

        event = cls(
            deliveries=deliveries,
            id=id,
            tenant_id=tenant_id,
            created_at=created_at,
            payload=payload,
            type_=type_,
        )

        event.additional_properties = d
        return event

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
