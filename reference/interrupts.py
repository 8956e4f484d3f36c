"""Ctrl-C (SIGINT) in a training run: never lost, and never in the middle of a checkpoint.

Python runs a signal handler between bytecodes wherever the main thread is, inside a garbage
collector callback too (JAX, which TensorFlow imports, installs one); a KeyboardInterrupt
raised there is printed as "Exception ignored" and dropped, and the run would go on. While
`noticed()` is active each Ctrl-C is also recorded, and `raise_if_pressed()` raises it again at
the training loop's next host call. `held()` defers a Ctrl-C until a checkpoint is written.
Both are no-ops off the main thread or where SIGINT has no Python handler (a program that
ignores it).
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

_pressed = threading.Event()  # a Ctrl-C came while `noticed()` was active


def _on_ctrl_c(number, frame) -> None:
    _pressed.set()
    raise KeyboardInterrupt


def _python_handler() -> bool:
    """Whether this is the main thread and SIGINT raises KeyboardInterrupt here."""
    return threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _on_ctrl_c)


@contextlib.contextmanager
def noticed() -> Iterator[None]:
    """Record each Ctrl-C (it still raises KeyboardInterrupt at once) while the block runs."""
    if not _python_handler():
        yield
        return
    previous = signal.signal(signal.SIGINT, _on_ctrl_c)
    _pressed.clear()
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _pressed.clear()


def raise_if_pressed() -> None:
    """KeyboardInterrupt if a Ctrl-C came while `noticed()` is active (one Python dropped)."""
    if _pressed.is_set():
        raise KeyboardInterrupt


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold Ctrl-C while the block runs and raise KeyboardInterrupt after it, if it was
    pressed meanwhile."""
    if not _python_handler():
        yield
        return
    pressed = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: pressed.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        if previous is _on_ctrl_c:
            _pressed.set()
        raise KeyboardInterrupt
