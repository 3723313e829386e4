from enum import StrEnum


class AuthNoneType(StrEnum):
    NONE = "none"

    def __str__(self) -> str:
        return str(self.value)
