"""The guard against request forgery: a webhook's name resolved once, every address checked, the checked one used.

A participant's URL must not make the server reach what only the server can reach: loopback, link-local (the cloud
metadata service at 169.254.169.254 among them), private and unique-local ranges, and the other special ones, nor
IPv6 addresses that embed such an IPv4 address (mapped, 6to4, Teredo, NAT64). The name is resolved once per try and
the connection goes to the address checked here (never resolved again by a library), so a name that answers a public
address to the check and a private one to the connection (DNS rebinding) gains nothing. The host may allow named
ranges (``[notify] allow_networks``); the tests allow ``127.0.0.1/32`` to run their receiver.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from grader.hosting.errors import DeliveryFailed

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: A name and port to the addresses they resolve to (``getaddrinfo``'s, or a fixed table's).
Resolver = Callable[[str, int], list[str]]

#: The NAT64 well-known prefix (RFC 6052): its addresses carry an IPv4 address in their last 32 bits.
NAT64 = ipaddress.ip_network("64:ff9b::/96")
#: Ranges the ``ipaddress`` flags do not all cover: shared address space (RFC 6598, carrier NAT) and benchmarking.
EXTRA_SPECIAL = tuple(ipaddress.ip_network(n) for n in ("100.64.0.0/10", "198.18.0.0/15", "192.0.0.0/24", "fc00::/7", "fe80::/10"))


#: The longest wait for the system's resolver: ``getaddrinfo`` has no timeout of its own, and a participant's name
#: server may answer slowly on purpose; past this the try fails and the lookup is left to finish on its own thread.
RESOLVE_S = 5.0


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses of ``host`` by the system's resolver (one ``getaddrinfo``, TCP), within :data:`RESOLVE_S`."""
    answer: list[list[str] | BaseException] = []

    def lookup() -> None:
        try:
            answer.append([str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)])
        except (OSError, UnicodeError) as error:
            answer.append(error)

    thread = threading.Thread(target=lookup, name="grader-notify-resolve", daemon=True)
    thread.start()
    thread.join(RESOLVE_S)
    if not answer:
        raise DeliveryFailed(f"cannot resolve {host!r} within {RESOLVE_S:g} s")
    if isinstance(answer[0], BaseException):
        raise DeliveryFailed(f"cannot resolve {host!r}: {answer[0]}")
    return answer[0]


def fixed_resolver(table: Sequence[tuple[str, str]], fallback: Resolver = system_resolver) -> Resolver:
    """``[notify] resolve``: names of ``table`` answer their address, without DNS; any other name asks ``fallback``."""
    fixed = {name.lower().rstrip("."): address for name, address in table}

    def resolve(host: str, port: int) -> list[str]:
        known = fixed.get(host.lower().rstrip("."))
        return [known] if known is not None else fallback(host, port)

    return resolve


def embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, 6to4, Teredo's client, NAT64), or None."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def why_special(address: Address) -> str | None:
    """Why a webhook may not reach ``address`` unless the host allows it (None: a public address)."""
    inner = embedded_ipv4(address)
    if inner is not None:
        reason = why_special(inner)
        return None if reason is None else f"embeds {inner}, {reason}"
    for flag in ("loopback", "link_local", "unspecified", "multicast", "private", "reserved"):  # the most telling name first
        if getattr(address, f"is_{flag}"):
            return flag.replace("_", "-")
    if any(address in network for network in EXTRA_SPECIAL if network.version == address.version):
        return "special-purpose"
    if not address.is_global:
        return "not global"
    return None


@dataclass(frozen=True)
class Guard:
    """The resolver and the ranges the host allows: :meth:`address` gives the one address a try may connect to."""

    allowed: tuple[Network, ...] = ()
    resolver: Resolver = system_resolver

    @classmethod
    def of(cls, allow_networks: Sequence[str], resolve: Sequence[tuple[str, str]] = ()) -> Guard:
        """The guard of a competition's ``[notify]`` (already checked when the file was read)."""
        return cls(tuple(ipaddress.ip_network(n, strict=False) for n in allow_networks), fixed_resolver(resolve))

    def address(self, host: str, port: int) -> Address:
        """The address to connect to for ``host``: resolved once; refused (:class:`DeliveryFailed`) when any answer
        is special and not allowed, so that a name cannot hide a private address among public ones."""
        literal = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        try:
            answers = [literal]
            ipaddress.ip_address(literal)
        except ValueError:
            answers = self.resolver(literal, port)
        if not answers:
            raise DeliveryFailed(f"{host!r} resolves to no address")
        checked: list[Address] = []
        for answer in answers:
            try:
                address = ipaddress.ip_address(answer.split("%", 1)[0])
            except ValueError:
                raise DeliveryFailed(f"{host!r} resolves to {answer!r}, not an address") from None
            reason = why_special(address)
            if reason is not None and not any(address in n for n in self.allowed if n.version == address.version):
                raise DeliveryFailed(f"refused: {host} is {address}, {reason} (not an address a webhook may reach)")
            checked.append(address)
        return checked[0]
