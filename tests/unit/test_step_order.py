"""The order of live steps: a stream's final before waiting partial steps, partial steps first come first served,
never more running than the slots."""

from __future__ import annotations

import threading
import time

from engines.speech.step_order import StepOrder


def _run(order: StepOrder, name: str, final: bool, started: list[str], release: threading.Event) -> threading.Thread:
    def work() -> None:
        with order.turn(final):
            started.append(name)
            release.wait(5)

    thread = threading.Thread(target=work)
    thread.start()
    return thread


def _until(condition, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


def test_a_final_goes_before_partial_steps_that_waited_longer() -> None:
    order = StepOrder(1)
    started: list[str] = []
    gates = {name: threading.Event() for name in ("busy", "p1", "p2", "final")}
    threads = [_run(order, "busy", False, started, gates["busy"])]
    _until(lambda: started == ["busy"])
    for waiting, (name, final) in enumerate((("p1", False), ("p2", False), ("final", True)), start=1):
        threads.append(_run(order, name, final, started, gates[name]))
        _until(lambda: order.waiting == waiting)  # noqa: B023 - checked before the loop moves on
    for done, name in enumerate(("busy", "final", "p1"), start=2):
        gates[name].set()
        _until(lambda: len(started) == done)  # noqa: B023 - checked before the loop moves on
    gates["p2"].set()
    for thread in threads:
        thread.join(5)
    assert started == ["busy", "final", "p1", "p2"]


def test_no_more_steps_run_than_slots() -> None:
    order = StepOrder(2)
    running = peak = 0
    lock = threading.Lock()

    def work() -> None:
        nonlocal running, peak
        with order.turn(False):
            with lock:
                running += 1
                peak = max(peak, running)
            time.sleep(0.02)
            with lock:
                running -= 1

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert peak == 2 and order.waiting == 0
