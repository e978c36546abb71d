"""A per-item function for the local pool's crash handling: importable by spawned workers."""

from __future__ import annotations

import os
import signal


def echo_or_die(item: str) -> tuple[str, str]:
    if item.startswith("die"):
        os._exit(9)  # as the kernel's OOM killer would end it: no exception, no cleanup
    return ("ok", item)


def echo_or_be_killed(item: str) -> tuple[str, str]:
    if item.startswith("die"):
        os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's OOM killer sends
    return ("ok", item)
