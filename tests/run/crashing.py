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


def where(item: str, client: int) -> tuple[str, bool]:
    """The item, and whether the client (pid ``client``) ran it; a little work either way, so
    that both take items."""
    import time

    time.sleep(0.05)
    return (item, os.getpid() == client)


def die_in_a_worker(item: str, client: int, flag: str) -> tuple[str, str]:
    """In a worker, ``die…`` items end the process (after touching ``flag``); the client's own
    items wait for that flag, so the client cannot take the dying item first."""
    import time
    from pathlib import Path

    if os.getpid() == client:
        deadline = time.monotonic() + 60
        while not Path(flag).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return ("ok", item)
    if item.startswith("die"):
        Path(flag).touch()
        os._exit(9)
    return ("ok", item)


def boom(item: str) -> str:
    if item == "boom":
        raise RuntimeError("a bug")
    return item
