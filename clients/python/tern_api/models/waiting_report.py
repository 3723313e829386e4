from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.resend import Resend


T = TypeVar("T", bound="WaitingReport")


@_attrs_define
class WaitingReport:
    """Deliveries still waiting that a recover found.

    Attributes:
        attempts_examined (int): Failed attempts (outcome `retry`) read in the window.
        complete (bool): False when the window held more than one call handles: call again.
        not_resendable (list[str]): Waiting events the outbox no longer keeps: not resent (their retries go on).
        resent (list[Resend]): The resends made.
        still_waiting (int): Distinct deliveries among them still waiting for their next attempt.
    """

    attempts_examined: int
    complete: bool
    not_resendable: list[str]
    resent: list[Resend]
    still_waiting: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        attempts_examined = self.attempts_examined

        complete = self.complete

        not_resendable = self.not_resendable

        resent = []
        for resent_item_data in self.resent:
            resent_item = resent_item_data.to_dict()
            resent.append(resent_item)

        still_waiting = self.still_waiting

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "attempts_examined": attempts_examined,
                "complete": complete,
                "not_resendable": not_resendable,
                "resent": resent,
                "still_waiting": still_waiting,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.resend import Resend

        d = dict(src_dict)
        attempts_examined = d.pop("attempts_examined")

        complete = d.pop("complete")

        not_resendable = cast(list[str], d.pop("not_resendable"))

        resent = []
        _resent = d.pop("resent")
        for resent_item_data in _resent:
            resent_item = Resend.from_dict(resent_item_data)

            resent.append(resent_item)

        still_waiting = d.pop("still_waiting")

        waiting_report = cls(
            attempts_examined=attempts_examined,
            complete=complete,
            not_resendable=not_resendable,
            resent=resent,
            still_waiting=still_waiting,
        )

        waiting_report.additional_properties = d
        return waiting_report

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
