#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Counts the MetaRoCE datagrams (UDP port 4792) crossing one interface.

    udp_sniff.py IFACE OUTFILE

Runs until SIGTERM or SIGINT, then writes one line per direction seen:

    SADDR>DADDR data=N hello=N challenge=N ack=N other=N sports=N concurrent=N paths=N conns=HEX,... streams=N ce=N echoed=N missed=N

`sports`: distinct UDP source ports of data packets; `concurrent`: the most
source ports in use at once (a port is in use from its first data packet to
its last, counted in data packets: a path that moves to a new port leaves its
old one, though a packet sent on the old port just before the move may arrive
after the new port's first); `paths`: distinct path ids (bytes 2..4) of data
packets; `challenge`: hellos with the CHALLENGE flag (a doubted restart
claim, or a keepalive to a peer silent for a second), counted in `hello`
too; `conns`: distinct
connection ids (bytes 4..8 of the MetaRoCE header) of data packets; `streams`:
distinct stream ids (bytes 20..24) of data packets; `ce`: data packets that
arrived marked ECN CE; `echoed`: the sum of the CE counts the ACKs carry (the
marks the receiver reports to the sender); `missed`: frames of the
interface (any protocol, both directions together) the kernel dropped
because this reader fell behind, so a count here may be short by up to that
many. Needs CAP_NET_RAW; run inside the namespace with `ip netns exec`.
"""

import signal
import socket
import struct
import sys

ETH_P_ALL = 0x0003
PORT = 4792
SO_RCVBUFFORCE = 33
SOL_PACKET = 263
PACKET_STATISTICS = 6


def concurrent(spans):
    """The most of the inclusive intervals (first, last) that overlap."""
    events = sorted([(a, 0) for a, _ in spans] + [(b, 1) for _, b in spans])
    best = now = 0
    for _, end in events:
        now += -1 if end else 1
        best = max(best, now)
    return best


def main():
    iface, out = sys.argv[1], sys.argv[2]
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((iface, 0))
    # A deep queue: under emulation this reader is slower than the data path.
    try:
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
    s.settimeout(0.2)
    seen = {}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    # Tell the caller we are listening.
    open(out + ".ready", "w").close()
    while not stop:
        try:
            frame = s.recv(65535)
        except socket.timeout:
            continue
        except InterruptedError:
            continue
        if len(frame) < 14 + 20 + 8 or struct.unpack("!H", frame[12:14])[0] != 0x0800:
            continue
        ip = frame[14:]
        ihl = (ip[0] & 0x0F) * 4
        if ip[9] != 17 or len(ip) < ihl + 8:
            continue
        sport, dport = struct.unpack("!HH", ip[ihl:ihl + 4])
        if dport != PORT:
            continue
        mr = ip[ihl + 8:]
        if len(mr) < 16:
            continue
        key = "%s>%s" % (socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20]))
        d = seen.setdefault(key, {"data": 0, "hello": 0, "challenge": 0, "ack": 0, "other": 0,
                                  "ce": 0, "echoed": 0, "sports": set(), "paths": set(),
                                  "conns": set(),
                                  "streams": set(), "span": {}})
        ptype = mr[0] & 0x0F
        if ptype == 1 and len(mr) >= 36:
            d["data"] += 1
            d["sports"].add(sport)
            d["paths"].add(mr[2:4].hex())
            first = d["span"].get(sport, (d["data"], 0))[0]
            d["span"][sport] = (first, d["data"])
            d["conns"].add(mr[4:8].hex())
            d["streams"].add(mr[20:24].hex())
            if ip[1] & 3 == 3:
                d["ce"] += 1
        elif ptype == 4:
            d["hello"] += 1
            # Hello flag CHALLENGE (byte 1): a claim doubted, or a keepalive.
            if mr[1] & 1:
                d["challenge"] += 1
        elif ptype == 2:
            d["ack"] += 1
            if len(mr) >= 50:
                d["echoed"] += struct.unpack("!H", mr[48:50])[0]
        else:
            d["other"] += 1
    # struct tpacket_stats { unsigned int tp_packets, tp_drops; }
    _, missed = struct.unpack("II", s.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    with open(out, "w") as f:
        for key, d in sorted(seen.items()):
            f.write("%s data=%d hello=%d challenge=%d ack=%d other=%d sports=%d concurrent=%d "
                    "paths=%d conns=%s streams=%d ce=%d echoed=%d missed=%d\n" % (
                        key, d["data"], d["hello"], d["challenge"], d["ack"], d["other"],
                        len(d["sports"]),
                        concurrent(d["span"].values()), len(d["paths"]),
                        ",".join(sorted(d["conns"])) or "-", len(d["streams"]), d["ce"],
                        d["echoed"], missed))


if __name__ == "__main__":
    main()
