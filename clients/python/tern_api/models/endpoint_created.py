from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.endpoint import Endpoint


T = TypeVar("T", bound="EndpointCreated")


@_attrs_define
class EndpointCreated:
    """A new endpoint and its signing secret: the only time the secret is shown.

    Attributes:
        endpoint (Endpoint): An endpoint. Its secrets appear as fingerprints only.
        secret (str): The signing secret (`whsec_` + base64): store it now, it is never shown again.
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

        endpoint_created = cls(
            endpoint=endpoint,
            secret=secret,
        )

        endpoint_created.additional_properties = d
        return endpoint_created

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
