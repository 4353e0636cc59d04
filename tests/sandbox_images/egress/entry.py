"""egress: try to reach the outside; exit 0 (with a valid empty run) only if it got out, else 1."""

import socket

from harness import empty_run, log

TIMEOUT = 5.0
got_out = []

for host, port in (("1.1.1.1", 53), ("8.8.8.8", 53), ("1.1.1.1", 443)):
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT):
            got_out.append(f"tcp {host}:{port}")
            log(f"egress: tcp connect {host}:{port}: CONNECTED")
    except OSError as error:
        log(f"egress: tcp connect {host}:{port}: refused ({error})")

try:
    socket.setdefaulttimeout(TIMEOUT)
    addresses = sorted({info[4][0] for info in socket.getaddrinfo("example.com", 80)})
    got_out.append("dns example.com")
    log(f"egress: dns example.com: RESOLVED {addresses}")
except OSError as error:
    log(f"egress: dns example.com: refused ({error})")

try:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.settimeout(TIMEOUT)
    # A raw DNS query for example.com/A to 1.1.1.1: any answer means the packet got out.
    query = bytes.fromhex("abcd01000001000000000000076578616d706c6503636f6d0000010001")
    udp.sendto(query, ("1.1.1.1", 53))
    udp.recvfrom(512)
    got_out.append("udp 1.1.1.1:53")
    log("egress: udp dns 1.1.1.1:53: ANSWERED")
except OSError as error:
    log(f"egress: udp dns 1.1.1.1:53: refused ({error})")

if got_out:
    empty_run()
    log(f"egress: GOT OUT via {', '.join(got_out)}")
    raise SystemExit(0)
log("egress: no route out (all attempts refused)")
raise SystemExit(1)
