"""The fidelity watchdog judges a class by its alive devices: a crash is not a slow host."""
import math

from edgebed.emulator.watchdog import FidelityWatchdog

EXPECTED = [{"class": "a", "devices": 4, "cycle_s": 0.1, "rate_per_device": 10.0}]


def _feed(dog: FidelityWatchdog, crash_at: float | None) -> None:
    """Four devices at their expected 10 updates/s for 20 s; devices 0 and 1 crash at ``crash_at``."""
    rows = []
    for d in range(4):
        for i in range(200):
            t = 0.05 + i / 10
            if crash_at is not None and d < 2 and t > crash_at:
                break
            rows.append((t, d))
    for t, d in sorted(rows):
        dog.observe({"device": d, "virtual_time": math.nan, "wall_time": t})
    if crash_at is not None:   # the PS draws the crash right after the device's last push
        dog.crashed(0)
        dog.crashed(1)


def test_a_crash_is_not_read_as_a_slow_class():
    dog = FidelityWatchdog(EXPECTED, {d: "a" for d in range(4)}, tolerance=0.1)
    _feed(dog, crash_at=5.0)
    assert dog.check() == []


def test_without_the_crash_notice_the_same_pushes_are_flagged():
    dog = FidelityWatchdog(EXPECTED, {d: "a" for d in range(4)}, tolerance=0.1)
    _feed(dog, crash_at=None)
    assert dog.check() == []                    # all four alive at the expected rate: quiet
    slow = FidelityWatchdog(EXPECTED, {d: "a" for d in range(4)}, tolerance=0.1)
    for t, d in sorted((0.05 + i / 10, d) for d in range(4) for i in range(200) if d >= 2 or 0.05 + i / 10 <= 5.0):
        slow.observe({"device": d, "virtual_time": math.nan, "wall_time": t})
    warnings = slow.check()                     # the same pushes, no crash notice: half the rate
    assert len(warnings) == 1 and "class 'a'" in warnings[0] and "0.6" in warnings[0]
