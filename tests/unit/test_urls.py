import pytest

from speclab.errors import SpeclabError
from speclab.urls import Endpoint, scrub_paths


@pytest.mark.parametrize(
    "given",
    ["http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/", "h:8000",
     "http://h:8000/v1/v1", " http://h:8000/v1 "],
)
def test_every_spelling_gives_one_root(given: str) -> None:
    ep = Endpoint.parse(given)
    assert ep.root == "http://h:8000"
    assert ep.api("chat/completions") == "http://h:8000/v1/chat/completions"
    assert ep.api("/v1/chat/completions") == "http://h:8000/v1/chat/completions"
    assert ep.at_root("metrics") == "http://h:8000/metrics"
    assert ep.at_root("/health") == "http://h:8000/health"
    assert ep.at_root("tokenize") == "http://h:8000/tokenize"
    assert ep.at_root("/v1/metrics") == "http://h:8000/metrics"  # never under /v1
    assert ep.at_root("start_profile") == "http://h:8000/start_profile"


def test_prefix_behind_a_proxy_is_kept() -> None:
    ep = Endpoint.parse("https://gw.example/team-a/v1")
    assert ep.root == "https://gw.example/team-a"
    assert ep.api("models") == "https://gw.example/team-a/v1/models"
    assert ep.port == 443


@pytest.mark.parametrize("bad", ["", "ftp://h:1", "http://h:99999", "http://h:8000/v1?x=1"])
def test_bad_endpoints_say_one_sentence(bad: str) -> None:
    with pytest.raises(SpeclabError) as info:
        Endpoint.parse(bad)
    assert "\n" not in str(info.value)


def test_scrub_paths_keeps_urls() -> None:
    line = "LD_PRELOAD=/usr/lib/x/libtc.so:/opt/v/lib/libiomp5.so /v/bin/python --model /root/m/smol http://h:8000/v1/models"
    assert scrub_paths(line) == ("LD_PRELOAD=…/libtc.so:…/libiomp5.so …/python --model …/smol "
                                 "http://h:8000/v1/models")
