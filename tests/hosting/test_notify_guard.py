"""The webhook's guard against request forgery, its URL rules and its signature, without a socket.

Each special address is refused by the real guard (:class:`grader.hosting.notify.addresses.Guard`): the metadata
service, loopback in both families, private, unique-local, shared and embedded ranges, and a name whose resolver
answers a private address at send time (the resolver is the guard's, injected here as the server injects
``[notify] resolve``). An allowed range lets exactly its own addresses through. The signature is checked with the
receiver's recipe of docs/hosting.md (``grader.hosting.notify.signing.verify``).
"""

from __future__ import annotations

import ipaddress
import time
from pathlib import Path
from typing import Any

import pytest

from grader.hosting.errors import DeliveryFailed, NotifySettingRefused
from grader.hosting.notify import addresses
from grader.hosting.notify.addresses import Guard, fixed_resolver
from grader.hosting.notify.signing import new_secret, signature, verify
from grader.hosting.notify.webhook import parse_url

PUBLIC = "93.184.215.14"


def _no_dns(host: str, port: int) -> list[str]:
    raise AssertionError(f"{host} asked of DNS")


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("169.254.169.254", "link-local"),
        ("127.0.0.1", "loopback"),
        ("[::1]", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.1", "private"),
        ("172.16.5.4", "private"),
        ("100.64.0.1", "special-purpose"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("[fc00::1]", "private"),
        ("[fe80::1]", "link-local"),
        ("[::ffff:127.0.0.1]", "embeds 127.0.0.1"),
        ("[::ffff:169.254.169.254]", "embeds 169.254.169.254"),
        ("[2002:a00:1::]", "embeds 10.0.0.1"),
        ("[64:ff9b::a9fe:a9fe]", "embeds 169.254.169.254"),
    ],
)
def test_special_addresses_are_refused(host: str, why: str) -> None:
    with pytest.raises(DeliveryFailed, match=why):
        Guard(resolver=_no_dns).address(host, 80)


def test_a_name_resolving_to_a_private_address_at_send_time_is_refused() -> None:
    answers = {"hook.example": [PUBLIC]}
    guard = Guard(resolver=lambda host, port: answers[host])
    assert guard.address("hook.example", 443) == ipaddress.ip_address(PUBLIC)
    answers["hook.example"] = ["10.0.0.7"]  # the name changed its answer after the URL was set: judged at the try
    with pytest.raises(DeliveryFailed, match="hook.example is 10.0.0.7, private"):
        guard.address("hook.example", 443)
    answers["hook.example"] = [PUBLIC, "127.0.0.1"]  # one private answer among public ones refuses the name
    with pytest.raises(DeliveryFailed, match="loopback"):
        guard.address("hook.example", 443)


def test_the_resolve_table_answers_without_dns_and_is_checked() -> None:
    guard = Guard.of((), [("Hook.Test", "10.0.0.7")])
    with pytest.raises(DeliveryFailed, match="10.0.0.7, private"):
        guard.address("hook.test.", 80)
    assert fixed_resolver([("a.test", PUBLIC)], fallback=_no_dns)("A.TEST", 80) == [PUBLIC]


def test_an_allowed_range_lets_exactly_its_addresses_through() -> None:
    guard = Guard.of(["127.0.0.1/32"], [("local.test", "127.0.0.1")])
    assert str(guard.address("127.0.0.1", 80)) == "127.0.0.1"
    assert str(guard.address("local.test", 80)) == "127.0.0.1"
    for host in ("127.0.0.2", "[::1]", "[::ffff:127.0.0.1]", "169.254.169.254"):
        with pytest.raises(DeliveryFailed, match="refused"):
            guard.address(host, 80)


def test_a_public_address_passes() -> None:
    assert str(Guard(resolver=_no_dns).address(PUBLIC, 80)) == PUBLIC
    assert str(Guard(resolver=_no_dns).address("[2606:4700::1111]", 80)) == "2606:4700::1111"


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.org/x",
        "file:///etc/passwd",
        "http://user:pass@example.org/",
        "http://example.org/a b",
        "http://example.org/\r\nX-Injected: 1",
        "http:///path-only",
        "http://example.org:99999/",
        "http://example.org/#frag",
        "https://example.org/" + "a" * 2048,
    ],
)
def test_urls_the_server_does_not_send_to(url: str) -> None:
    with pytest.raises(NotifySettingRefused):
        parse_url(url)


def test_a_url_taken_apart_keeps_host_port_path_and_query() -> None:
    target = parse_url("https://Hook.Example:8443/in?x=1")
    assert (target.scheme, target.host, target.port, target.path, target.host_header) == (
        "https",
        "hook.example",
        8443,
        "/in?x=1",
        "hook.example:8443",
    )
    assert parse_url("http://[::1]/").host_header == "[::1]"


def test_the_signature_verifies_and_refuses_tampering_and_replay() -> None:
    secret, body = new_secret(), b'{"type":"ping"}'
    header = signature(secret, 1_700_000_000, body)
    assert verify(secret, header, body, now=1_700_000_100)
    assert not verify(secret, header, body + b" ", now=1_700_000_100)  # another body
    assert not verify(new_secret(), header, body, now=1_700_000_100)  # another secret
    assert not verify(secret, header, body, now=1_700_000_000 + 301)  # outside the replay window
    assert not verify(secret, header.replace("t=1700000000", "t=1700000100"), body, now=1_700_000_100)  # a moved timestamp
    assert not verify(secret, "v1=" + header.split("v1=")[1], body, now=1_700_000_100)  # no timestamp


def test_the_documented_receiver_recipe_verifies_what_the_server_signs() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "hosting.md").read_text(encoding="utf-8")
    recipe = page.split("**The signature.**", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(recipe, namespace)  # the page's own code, as a receiver would paste it
    secret, body = new_secret(), b'{"competition":"c","type":"ping"}'
    header = signature(secret, int(time.time()), body)
    assert namespace["verify"](secret, header, body)
    assert not namespace["verify"](secret, header, body.replace(b"ping", b"pong"))
    assert not namespace["verify"](secret, signature(secret, int(time.time()) - 600, body), body)


def test_the_system_resolver_answers_and_a_slow_one_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    assert {"127.0.0.1", "::1"} & set(addresses.system_resolver("localhost", 80))  # /etc/hosts: no network needed
    # A name server that answers slowly on purpose: getaddrinfo has no timeout, so a slow one stands in for it here.
    monkeypatch.setattr(addresses.socket, "getaddrinfo", lambda *args, **kwargs: time.sleep(3) or [])
    monkeypatch.setattr(addresses, "RESOLVE_S", 0.2)
    started = time.monotonic()
    with pytest.raises(DeliveryFailed, match="cannot resolve 'slow.example' within 0.2 s"):
        Guard().address("slow.example", 80)
    assert time.monotonic() - started < 1.5
