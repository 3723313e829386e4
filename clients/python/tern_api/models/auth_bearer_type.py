from enum import StrEnum


class AuthBearerType(StrEnum):
    BEARER = "bearer"

    def __str__(self) -> str:
        return str(self.value)
