"""Used by Benchmarks/serial-spans.sh: where a serial call's time goes, read off the wire.

`python3 Benchmarks/serial-spans.py PCAP PORT` reads a tcpdump capture (nanosecond
timestamps) of one serial connection (K=1 C=1) to PORT on the loopback and
prints: calls, the median server span (a request's packet to its response's:
the server's wake-up, read, work and write), the median client span (a
response's packet to the next request's: the load generator's wake-up, decode,
bookkeeping and the next request's encode and write), and the median period
(one request's packet to the next's: a whole call as both sides pay for it).
The three are timed the same way for any two servers, whatever spans their
load generators' own clocks cover. Packets without payload (ACKs) are skipped.
"""
import statistics
import struct
import sys


def packets(path, port):
    """[(ns, to_server)] of the payload-carrying TCP packets of the busiest connection to `port` in a pcap of the loopback."""
    data = open(path, "rb").read()
    magic, = struct.unpack("<I", data[:4])
    if magic != 0xA1B23C4D:
        raise SystemExit(f"{path}: not a nanosecond pcap (magic {magic:#x})")
    linktype, = struct.unpack("<I", data[20:24])
    link_header = {1: 14, 113: 16, 276: 20}.get(linktype)
    if link_header is None:
        raise SystemExit(f"{path}: link type {linktype} not read here")
    connections, offset = {}, 24
    while offset + 16 <= len(data):
        seconds, nanoseconds, included, _ = struct.unpack("<IIII", data[offset:offset + 16])
        offset += 16
        ip = data[offset + link_header:offset + included]
        offset += included
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        ip_header = (ip[0] & 15) * 4
        total, = struct.unpack(">H", ip[2:4])
        tcp = ip[ip_header:]
        source, destination = struct.unpack(">HH", tcp[:4])
        if total - ip_header - (tcp[12] >> 4) * 4 > 0:
            client_port = source if destination == port else destination
            connections.setdefault(client_port, []).append((seconds * 1_000_000_000 + nanoseconds, destination == port))
    # The serial connection: the one with the most packets (kiosk-bench reads the server's counters on another).
    return max(connections.values(), key=len, default=[])


def spans(found):
    """Server spans, client spans and periods in µs: a request's last packet → its response's first,
    a response's last packet → the next request's first, one request's first packet → the next's."""
    server, client, starts = [], [], []
    previous = None
    for t, to_server in found:
        if previous is not None and previous[1] != to_server:
            (server if previous[1] else client).append((t - previous[0]) / 1000)
        if to_server and (previous is None or not previous[1]):
            starts.append(t)
        previous = (t, to_server)
    period = [(b - a) / 1000 for a, b in zip(starts, starts[1:])]
    return server, client, period


if __name__ == "__main__":
    server, client, period = spans(packets(sys.argv[1], int(sys.argv[2])))
    if not server or not client or not period:
        raise SystemExit(f"{sys.argv[1]}: no request and response packets to port {sys.argv[2]}")
    print(len(server), *(round(statistics.median(values), 1) for values in (server, client, period)))
