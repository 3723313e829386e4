from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="DeadLetteredBudget")


@_attrs_define
class DeadLetteredBudget:
    """A budget that ended in the DLQ.

    Attributes:
        dead_lettered_at (datetime.datetime): When.
        endpoint_id (str): Endpoint.
        reason (str): Why (`exhausted`, `gone`, ...).
        replay_count (int): Replays before that budget.
        replayed_since (bool): True when a later budget (a replay or resend) exists.
    """

    dead_lettered_at: datetime.datetime
    endpoint_id: str
    reason: str
    replay_count: int
    replayed_since: bool
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        dead_lettered_at = self.dead_lettered_at.isoformat()

        endpoint_id = self.endpoint_id

        reason = self.reason

        replay_count = self.replay_count

        replayed_since = self.replayed_since

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "dead_lettered_at": dead_lettered_at,
                "endpoint_id": endpoint_id,
                "reason": reason,
                "replay_count": replay_count,
                "replayed_since": replayed_since,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        dead_lettered_at = datetime.datetime.fromisoformat(d.pop("dead_lettered_at"))

        endpoint_id = d.pop("endpoint_id")

        reason = d.pop("reason")

        replay_count = d.pop("replay_count")

        replayed_since = d.pop("replayed_since")

        dead_lettered_budget = cls(
            dead_lettered_at=dead_lettered_at,
            endpoint_id=endpoint_id,
            reason=reason,
            replay_count=replay_count,
            replayed_since=replayed_since,
        )

        dead_lettered_budget.additional_properties = d
        return dead_lettered_budget

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
