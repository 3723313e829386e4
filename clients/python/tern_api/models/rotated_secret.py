from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.endpoint import Endpoint


T = TypeVar("T", bound="RotatedSecret")


@_attrs_define
class RotatedSecret:
    """A rotated secret: the only time the new secret is shown.

    Attributes:
        endpoint (Endpoint): An endpoint. Its secrets appear as fingerprints only.
        secret (str): The new signing secret; it signs at once.
    """

    endpoint: Endpoint
    secret: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        endpoint = self.endpoint.to_dict()

        secret = self.secret

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "endpoint": endpoint,
                "secret": secret,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.endpoint import Endpoint

        d = dict(src_dict)
        endpoint = Endpoint.from_dict(d.pop("endpoint"))

        secret = d.pop("secret")

        rotated_secret = cls(
            endpoint=endpoint,
            secret=secret,
        )

        rotated_secret.additional_properties = d
        return rotated_secret

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
