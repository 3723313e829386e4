from enum import StrEnum


class PayloadFormat(StrEnum):
    RAW = "raw"
    STANDARD_WEBHOOKS = "standard_webhooks"

    def __str__(self) -> str:
        return str(self.value)
