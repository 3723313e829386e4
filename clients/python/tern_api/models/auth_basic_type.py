from enum import StrEnum


class AuthBasicType(StrEnum):
    BASIC = "basic"

    def __str__(self) -> str:
        return str(self.value)
