from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.replay_report import ReplayReport
    from ..models.waiting_report import WaitingReport


T = TypeVar("T", bound="RecoverReport")


@_attrs_define
class RecoverReport:
    """What a recover did.

    Attributes:
        dead_letters (ReplayReport): A DLQ replay's result.
        enabled (bool): True when this call enabled the endpoint.
        endpoint_id (str): Endpoint.
        since (datetime.datetime): The window's start.
        until (datetime.datetime): The window's end (exclusive).
        waiting (WaitingReport): Deliveries still waiting that a recover found.
    """

    dead_letters: ReplayReport
    enabled: bool
    endpoint_id: str
    since: datetime.datetime
    until: datetime.datetime
    waiting: WaitingReport
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        dead_letters = self.dead_letters.to_dict()

        enabled = self.enabled

        endpoint_id = self.endpoint_id

        since = self.since.isoformat()

        until = self.until.isoformat()

        waiting = self.waiting.to_dict()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "dead_letters": dead_letters,
                "enabled": enabled,
                "endpoint_id": endpoint_id,
                "since": since,
                "until": until,
                "waiting": waiting,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.replay_report import ReplayReport
        from ..models.waiting_report import WaitingReport

        d = dict(src_dict)
        dead_letters = ReplayReport.from_dict(d.pop("dead_letters"))

        enabled = d.pop("enabled")

        endpoint_id = d.pop("endpoint_id")

        since = datetime.datetime.fromisoformat(d.pop("since"))

        until = datetime.datetime.fromisoformat(d.pop("until"))

        waiting = WaitingReport.from_dict(d.pop("waiting"))

        recover_report = cls(
            dead_letters=dead_letters,
            enabled=enabled,
            endpoint_id=endpoint_id,
            since=since,
            until=until,
            waiting=waiting,
        )

        recover_report.additional_properties = d
        return recover_report

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
