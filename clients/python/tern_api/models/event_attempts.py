from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.attempt import Attempt
    from ..models.dead_lettered_budget import DeadLetteredBudget


T = TypeVar("T", bound="EventAttempts")


@_attrs_define
class EventAttempts:
    """An event's attempts, oldest first.

    Attributes:
        attempts (list[Attempt]): Every try to this tenant's endpoints, oldest first.
        dead_letters (list[DeadLetteredBudget]): Budgets that ended in the DLQ.
        event_id (str): The event.
    """

    attempts: list[Attempt]
    dead_letters: list[DeadLetteredBudget]
    event_id: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        attempts = []
        for attempts_item_data in self.attempts:
            attempts_item = attempts_item_data.to_dict()
            attempts.append(attempts_item)

        dead_letters = []
        for dead_letters_item_data in self.dead_letters:
            dead_letters_item = dead_letters_item_data.to_dict()
            dead_letters.append(dead_letters_item)

        event_id = self.event_id

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "attempts": attempts,
                "dead_letters": dead_letters,
                "event_id": event_id,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.attempt import Attempt
        from ..models.dead_lettered_budget import DeadLetteredBudget

        d = dict(src_dict)
        attempts = []
        _attempts = d.pop("attempts")
        for attempts_item_data in _attempts:
            attempts_item = Attempt.from_dict(attempts_item_data)

            attempts.append(attempts_item)

        dead_letters = []
        _dead_letters = d.pop("dead_letters")
        for dead_letters_item_data in _dead_letters:
            dead_letters_item = DeadLetteredBudget.from_dict(dead_letters_item_data)

            dead_letters.append(dead_letters_item)

        event_id = d.pop("event_id")

        event_attempts = cls(
            attempts=attempts,
            dead_letters=dead_letters,
            event_id=event_id,
        )

        event_attempts.additional_properties = d
        return event_attempts

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
