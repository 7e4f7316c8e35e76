"""Pure parts of edgebed.emulator.runtimes.docker.links: which property goes to the kernel, token-bucket sizing."""
import pytest

from edgebed.emulator.runtimes.docker import links
from edgebed.scenario import LinkProfile

pytestmark = pytest.mark.timeout(10)

NO_NETEM = {"tbf": True, "htb": True, "netem": False}
FULL = {"tbf": True, "htb": True, "netem": True}


def test_levels_without_netem_send_delay_jitter_loss_to_app():
    prof = LinkProfile(rate=1e6, delay=0.02, jitter=0.005, loss=0.01)
    assert links.levels(prof, NO_NETEM) == {"rate": "kernel", "delay": "app", "jitter": "app", "loss": "app"}
    assert links.levels(prof, FULL) == {"rate": "kernel", "delay": "kernel", "jitter": "kernel", "loss": "kernel"}


def test_levels_mark_unrequested_properties_none():
    assert links.levels(LinkProfile(), FULL) == dict.fromkeys(links.LINK_PROPS, "none")
    assert links.levels(LinkProfile(delay=0.01), NO_NETEM)["rate"] == "none"


def test_levels_without_any_qdisc_fall_back_to_app():
    none = {"tbf": False, "htb": False, "netem": False}
    assert links.levels(LinkProfile(rate=1e6), none)["rate"] == "app"


@pytest.mark.parametrize("rate", [8e3, 1e6, 10e6, 1e9])
def test_tbf_burst_holds_two_frames_and_10ms(rate):
    b = links.tbf_burst(rate)
    assert b >= 2 * 1514
    assert b >= rate / 8 * 0.010 - 1


def test_bridge_name_is_docker_convention():
    assert links.bridge_ifname("0123456789abcdef0123") == "br-0123456789ab"
