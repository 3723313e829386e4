from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define

if TYPE_CHECKING:
    from ..models.new_event import NewEvent


T = TypeVar("T", bound="NewEventBatch")


@_attrs_define
class NewEventBatch:
    """Events to publish in one request: each as `publishEvent` takes one.

    Example:
        {'events': [{'id': 'evt_3f9c2b7e-order-o_1-paid', 'payload': {'amount': 4200, 'order_id': 'o_1'}, 'type':
            'order.paid'}, {'payload': {'order_id': 'o_2'}, 'type': 'order.shipped'}]}

    Attributes:
        events (list[NewEvent]): 1 to 100 events (`tern_ops::publish::MAX_BATCH_EVENTS`), published each on its own:
            each one's answer is in `results`, at the same index. The whole body is at most
            2,621,440 bytes (`x-max-body-bytes`; `tern_api::MAX_BATCH_BODY_BYTES`), each payload
            at most the deployment's payload limit (256 KiB by default).
    """

    events: list[NewEvent]

    def to_dict(self) -> dict[str, Any]:
        events = []
        for events_item_data in self.events:
            events_item = events_item_data.to_dict()
            events.append(events_item)

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "events": events,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.new_event import NewEvent

        d = dict(src_dict)
        events = []
        _events = d.pop("events")
        for events_item_data in _events:
            events_item = NewEvent.from_dict(events_item_data)

            events.append(events_item)

        new_event_batch = cls(
            events=events,
        )

        return new_event_batch
