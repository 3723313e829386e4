from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="ReplayReport")


@_attrs_define
class ReplayReport:
    """A DLQ replay's result.

    Attributes:
        already_replayed (int): Read and left: copies of a delivery this run already replayed.
        delivery_ids (list[str]): Delivery ids replayed (`<event id>.<endpoint id>`), at most 100.
        dry_run (bool): True for a dry run (nothing moved).
        examined (int): DLQ messages read (every tenant's: the DLQ is shared; another tenant's are made
            visible again at once). A dry run reads no message: it counts this tenant's
            dead-letter record entries read.
        matched (int): Of which matched the filters (this tenant's only). A dry run: the record's entries
            that match, each a dead letter still in the DLQ.
        replayed (int): Moved to the delivery queue.
        stopped (None | str | Unset): Why the run ended: `max_reached`, `time_budget` (call again) or `queue_empty`.
    """

    already_replayed: int
    delivery_ids: list[str]
    dry_run: bool
    examined: int
    matched: int
    replayed: int
    stopped: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        already_replayed = self.already_replayed

        delivery_ids = self.delivery_ids

        dry_run = self.dry_run

        examined = self.examined

        matched = self.matched

        replayed = self.replayed

        stopped: None | str | Unset
        if isinstance(self.stopped, Unset):
            stopped = UNSET
        else:
            stopped = self.stopped

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "already_replayed": already_replayed,
                "delivery_ids": delivery_ids,
                "dry_run": dry_run,
                "examined": examined,
                "matched": matched,
                "replayed": replayed,
            }
        )
        if stopped is not UNSET:
            field_dict["stopped"] = stopped

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        already_replayed = d.pop("already_replayed")

        delivery_ids = cast(list[str], d.pop("delivery_ids"))

        dry_run = d.pop("dry_run")

        examined = d.pop("examined")

        matched = d.pop("matched")

        replayed = d.pop("replayed")

        def _parse_stopped(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        stopped = _parse_stopped(d.pop("stopped", UNSET))

        replay_report = cls(
            already_replayed=already_replayed,
            delivery_ids=delivery_ids,
            dry_run=dry_run,
            examined=examined,
            matched=matched,
            replayed=replayed,
            stopped=stopped,
        )

        replay_report.additional_properties = d
        return replay_report

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
