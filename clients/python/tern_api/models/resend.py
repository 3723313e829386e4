from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="Resend")


@_attrs_define
class Resend:
    """A resend put on the delivery queue.

    Attributes:
        endpoint_id (str): Endpoint.
        event_id (str): Event.
        previous_state (str): Before the resend: `delivered`, `retrying`, `dead_lettered`, `in_flight` or `none`.
        replay_count (int): Replay count of the resend's budget: its attempts carry it.
    """

    endpoint_id: str
    event_id: str
    previous_state: str
    replay_count: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        endpoint_id = self.endpoint_id

        event_id = self.event_id

        previous_state = self.previous_state

        replay_count = self.replay_count

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "endpoint_id": endpoint_id,
                "event_id": event_id,
                "previous_state": previous_state,
                "replay_count": replay_count,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        endpoint_id = d.pop("endpoint_id")

        event_id = d.pop("event_id")

        previous_state = d.pop("previous_state")

        replay_count = d.pop("replay_count")

        resend = cls(
            endpoint_id=endpoint_id,
            event_id=event_id,
            previous_state=previous_state,
            replay_count=replay_count,
        )

        resend.additional_properties = d
        return resend

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
