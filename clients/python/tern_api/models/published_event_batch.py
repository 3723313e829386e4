from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.event_batch_result import EventBatchResult


T = TypeVar("T", bound="PublishedEventBatch")


@_attrs_define
class PublishedEventBatch:
    """The answer to a batch: one result per event, in the request's order, and their counts.

    Attributes:
        created (int): Events published now (status 202).
        existing (int): Events published before with the same id, type and payload (status 200).
        failed (int): Events not published (any other status): 0 when the whole batch is in.
        results (list[EventBatchResult]): One per event, at the event's index.
    """

    created: int
    existing: int
    failed: int
    results: list[EventBatchResult]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        created = self.created

        existing = self.existing

        failed = self.failed

        results = []
        for results_item_data in self.results:
            results_item = results_item_data.to_dict()
            results.append(results_item)

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "created": created,
                "existing": existing,
                "failed": failed,
                "results": results,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.event_batch_result import EventBatchResult

        d = dict(src_dict)
        created = d.pop("created")

        existing = d.pop("existing")

        failed = d.pop("failed")

        results = []
        _results = d.pop("results")
        for results_item_data in _results:
            results_item = EventBatchResult.from_dict(results_item_data)

            results.append(results_item)

        published_event_batch = cls(
            created=created,
            existing=existing,
            failed=failed,
            results=results,
        )

        published_event_batch.additional_properties = d
        return published_event_batch

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
