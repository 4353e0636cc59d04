"""One try of each channel against real receivers on loopback: a webhook over TLS to the checked address with the URL's
name in SNI and the certificate check; the bounds of a try (a receiver that never answers, one that drips its
answer, one that sends megabytes) all end it in time; e-mail through a relay that requires STARTTLS (aiosmtpd).
The guard allows 127.0.0.1/32 here, as the host's ``allow_networks`` would."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from grader.hosting.config import NotifyPolicy
from grader.hosting.errors import DeliveryFailed, NotifySettingRefused
from grader.hosting.notify import mail
from grader.hosting.notify.addresses import Guard
from grader.hosting.notify.signing import HEADER, verify
from grader.hosting.notify.webhook import post
from tests.hosting.support import free_port, wait_for

pytestmark = [pytest.mark.slow]

SECRET = "whsec_" + "ab" * 32
GUARD = Guard.of(["127.0.0.1/32"], [("hook.test", "127.0.0.1"), ("other.test", "127.0.0.1")])


def _certificate(folder: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for ``name`` (a DNS name, or an IP address) and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([_alt_name(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return cert_file, key_file


def _alt_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


class _Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[dict[str, str], bytes, str | None]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        sni = getattr(self.connection, "server_hostname", None)
        type(self).seen.append((dict(self.headers.items()), body, sni))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def tls_receiver(tmp_path: Path) -> Iterator[tuple[int, ssl.SSLContext, type[_Recorder]]]:
    cert, key = _certificate(tmp_path, "hook.test")
    handler = type("Recorder", (_Recorder,), {"seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(cert, key)
    names: list[str | None] = []
    serving.sni_callback = lambda sock, name, context: names.append(name)  # type: ignore[assignment,func-returns-value]
    server.socket = serving.wrap_socket(server.socket, server_side=True)
    handler.sni = names  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    trusting = ssl.create_default_context(cafile=str(cert))
    yield server.server_address[1], trusting, handler
    server.shutdown()
    server.server_close()


def test_https_goes_to_the_checked_address_with_the_urls_name_for_sni_and_the_certificate(
    tls_receiver: tuple[int, ssl.SSLContext, type[_Recorder]],
) -> None:
    port, trusting, handler = tls_receiver
    body = b'{"type":"ping"}'
    assert post(f"https://hook.test:{port}/in", SECRET, body, guard=GUARD, timeout_s=5, tls=trusting) == 204
    ((headers, received, _),) = handler.seen
    assert received == body and headers["Host"] == f"hook.test:{port}" and handler.sni == ["hook.test"]  # type: ignore[attr-defined]
    assert verify(SECRET, headers[HEADER], received, now=int(time.time()))
    with pytest.raises(DeliveryFailed, match="CERTIFICATE_VERIFY_FAILED|certificate"):  # the same address under another name
        post(f"https://other.test:{port}/in", SECRET, body, guard=GUARD, timeout_s=5, tls=trusting)
    with pytest.raises(DeliveryFailed, match="CERTIFICATE_VERIFY_FAILED|certificate"):  # a certificate nobody vouches for
        post(f"https://hook.test:{port}/in", SECRET, body, guard=GUARD, timeout_s=5)
    assert len(handler.seen) == 1


def _raw_receiver(answer: Callable[[socket.socket], None]) -> Iterator[int]:
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:  # the listener closed: the test is over
                return
            threading.Thread(target=_answer_then_close, args=(answer, connection), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1]
    stop.set()
    listener.close()


def _answer_then_close(answer: Callable[[socket.socket], None], connection: socket.socket) -> None:
    try:
        connection.recv(65536)
        answer(connection)
    except OSError:
        pass
    finally:
        connection.close()


def _silent(connection: socket.socket) -> None:
    time.sleep(5)


def _drip(connection: socket.socket) -> None:
    connection.sendall(b"HTTP/1.1 200 OK\r\n")
    for _ in range(60):  # one header byte every 0.3 s: each read is in time, the whole answer never is
        connection.sendall(b"X")
        time.sleep(0.3)


#: How many bytes of its 100 MiB body the flood got out before the server closed the connection.
FLOODED: list[int] = []


def _flood(connection: socket.socket) -> None:
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 104857600\r\n\r\n")
    chunk, sent = b"x" * 65536, 0
    try:
        for _ in range(1600):
            connection.sendall(chunk)
            sent += len(chunk)
    finally:
        FLOODED.append(sent)


@pytest.mark.parametrize(("answer", "bound_s"), [(_silent, 2.5), (_drip, 3.5), (_flood, 2.5)])
def test_a_try_is_bounded_in_time_and_in_bytes_read(answer: Callable[[socket.socket], None], bound_s: float) -> None:
    receiver = _raw_receiver(answer)
    port = next(receiver)
    try:
        started = time.monotonic()
        try:
            status = post(f"http://127.0.0.1:{port}/", SECRET, b"{}", guard=GUARD, timeout_s=1)
        except DeliveryFailed:
            status = None
        elapsed = time.monotonic() - started
        assert elapsed < bound_s, elapsed
        assert status in (None, 200) and (status is None) == (answer is not _flood)  # the flood's 200 counts, 4 KiB of it read
        if answer is _flood:  # the connection closed after 4 KiB: the flood stops at what the socket buffers held
            flooded = wait_for(lambda: FLOODED, timeout=10, what="the flood to stop")
            assert flooded[0] < 32 << 20, flooded
    finally:
        next(receiver, None)


class _Mailbox:
    def __init__(self) -> None:
        self.messages: list[tuple[list[str], bytes]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append((list(envelope.rcpt_tos), envelope.content))
        return "250 OK"


def test_e_mail_goes_through_a_relay_that_requires_starttls(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path, "127.0.0.1")
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(cert, key)
    box, port = _Mailbox(), free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port, tls_context=serving, require_starttls=True)
    controller.start()
    try:
        policy = NotifyPolicy(smtp_host="127.0.0.1", smtp_port=port, smtp_from="grader@c.test", smtp_starttls=True, timeout_s=5)
        facts = {"type": "submission.state", "submission": "s1", "state": "scored", "at": "2027-01-01T00:00:00Z"}
        mail.send(policy, mail.message(policy, "ada@example.org", "c", facts), tls=ssl.create_default_context(cafile=str(cert)))
        ((to, content),) = box.messages
        assert to == ["ada@example.org"] and b"Subject: [c] submission s1 is scored" in content
        with pytest.raises(DeliveryFailed, match="SMTP relay"):  # without STARTTLS the relay refuses it
            mail.send(
                NotifyPolicy(smtp_host="127.0.0.1", smtp_port=port, smtp_from="grader@c.test", timeout_s=5),
                mail.message(policy, "ada@example.org", "c", facts),
            )
        with pytest.raises(DeliveryFailed, match="SMTP relay"):  # a relay certificate nobody vouches for
            mail.send(policy, mail.message(policy, "ada@example.org", "c", facts))
        assert len(box.messages) == 1
    finally:
        controller.stop()


@pytest.mark.parametrize("address", ["a@b.c\r\nBcc: x@y.z", "a@b.c, x@y.z", "<a@b.c>", "a" * 250 + "@b.c", "no-at-sign"])
def test_an_e_mail_address_is_one_plain_address(address: str) -> None:
    with pytest.raises(NotifySettingRefused, match="one plain address"):
        mail.check_address(address)
