from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.delivery_state import DeliveryState
from ..types import UNSET, Unset

T = TypeVar("T", bound="DeliveryStatus")


@_attrs_define
class DeliveryStatus:
    """One delivery of an event.

    Attributes:
        endpoint_id (str): Endpoint.
        state (DeliveryState): Where one delivery of an event stands.
        attempt (int | None | Unset): Latest attempt number in that budget.
        delivered_at (datetime.datetime | None | Unset): When it was delivered.
        replay_count (int | None | Unset): Replay count of the latest budget (`null` before the first attempt).
    """

    endpoint_id: str
    state: DeliveryState
    attempt: int | None | Unset = UNSET
    delivered_at: datetime.datetime | None | Unset = UNSET
    replay_count: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        endpoint_id = self.endpoint_id

        state = self.state.value

        attempt: int | None | Unset
        if isinstance(self.attempt, Unset):
            attempt = UNSET
        else:
            attempt = self.attempt

        delivered_at: None | str | Unset
        if isinstance(self.delivered_at, Unset):
            delivered_at = UNSET
        elif isinstance(self.delivered_at, datetime.datetime):
            delivered_at = self.delivered_at.isoformat()
        else:
            delivered_at = self.delivered_at

        replay_count: int | None | Unset
        if isinstance(self.replay_count, Unset):
            replay_count = UNSET
        else:
            replay_count = self.replay_count

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "endpoint_id": endpoint_id,
                "state": state,
            }
        )
        if attempt is not UNSET:
            field_dict["attempt"] = attempt
        if delivered_at is not UNSET:
            field_dict["delivered_at"] = delivered_at
        if replay_count is not UNSET:
            field_dict["replay_count"] = replay_count

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        endpoint_id = d.pop("endpoint_id")

        state = DeliveryState(d.pop("state"))

        def _parse_attempt(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        attempt = _parse_attempt(d.pop("attempt", UNSET))

        def _parse_delivered_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                delivered_at_type_0 = datetime.datetime.fromisoformat(data)

                return delivered_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        delivered_at = _parse_delivered_at(d.pop("delivered_at", UNSET))

        def _parse_replay_count(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        replay_count = _parse_replay_count(d.pop("replay_count", UNSET))

        delivery_status = cls(
            endpoint_id=endpoint_id,
            state=state,
            attempt=attempt,
            delivered_at=delivered_at,
            replay_count=replay_count,
        )

        delivery_status.additional_properties = d
        return delivery_status

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
