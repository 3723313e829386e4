from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="EndpointPace")


@_attrs_define
class EndpointPace:
    """The pace an endpoint's receiver taught by pushing back (adaptive pacing,
    docs/endpoint-health.md).

        Attributes:
            changed_at (datetime.datetime): When it last changed.
            per_second (int): Requests per second its deliveries are spaced at (the lower of this and the
                endpoint's own `max_per_second`).
            slow_start (bool): Still in slow start: doubling while the receiver takes it.
    """

    changed_at: datetime.datetime
    per_second: int
    slow_start: bool
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        changed_at = self.changed_at.isoformat()

        per_second = self.per_second

        slow_start = self.slow_start

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "changed_at": changed_at,
                "per_second": per_second,
                "slow_start": slow_start,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        changed_at = datetime.datetime.fromisoformat(d.pop("changed_at"))

        per_second = d.pop("per_second")

        slow_start = d.pop("slow_start")

        endpoint_pace = cls(
            changed_at=changed_at,
            per_second=per_second,
            slow_start=slow_start,
        )

        endpoint_pace.additional_properties = d
        return endpoint_pace

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
