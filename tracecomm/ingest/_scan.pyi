from typing import Any

def scan(
    json_array: bytes | memoryview, bare: bool = False, head: bytes = b"", /
) -> dict[str, Any] | None: ...
