#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""A hostile sender for the adversarial selftest: MetaRoCE datagrams that a
host sharing the wire (or a user on the peer host, with an ordinary UDP
socket) can make, sent to a MetaRoCE port while real traffic flows.

    inject.py --iface IF --src IP --dst IP [--stranger IP] --out FILE
              [--rate PPS] [--hello-rate PPS] [--modes LIST] [--seed N]

It watches IF for the MetaRoCE datagrams SRC sends to DST (the real
traffic, kept in a ring of recent copies) and, until SIGTERM, sends to
DST:4792 from SRC (an ordinary UDP socket bound to SRC: the peer's own
address) a mix of:

  hello     well-formed hellos with a random sender epoch, naming receiver
            epoch 0 or a random one (--hello-rate per second, default 50):
            each claims that the peer restarted
  garbage   random bytes of random length
  truncated a copy of a real datagram cut short
  mutate    a copy of a real data packet with one header field set at
            random (RSN, payload length, stream, MSN, offset, message
            length, rkey, remote address, payload bytes), its path and PSN
            kept; only of a packet DST has acknowledged already (the
            injector watches DST's ACKs): a changed copy of one whose
            original was lost would take the original's place, which is
            what an on-path attacker can do and this test does not claim
            to stop (Documentation/security.md)
  replay    a real data packet or hello sent again unchanged, later (stale)
  stranger  garbage and copies from STRANGER, an address that is no peer

--rate is the datagrams per second of the other kinds together (default
200). Until SRC has sent something to copy, the kinds that copy send
nothing (garbage instead, if garbage is among them). The injector never
copies its own datagrams. At the end it writes one line to FILE:
`sent KIND=N ... captured=N attributable=N errors=N seconds=N`, where
attributable is the truncated copies of 8 bytes or more (long enough to
name the connection, so the receiver counts each as drop_truncated).
Needs CAP_NET_RAW (run inside the namespace with `ip netns exec`).
"""

import argparse
import random
import signal
import socket
import struct
import time

ETH_P_ALL = 0x0003
PORT = 4792
COMMON = 16

# Header fields of a data packet a mutation may set: (offset, size). The
# path, PSN, type and flags stay: a copy that keeps its path and PSN arrives
# after the real packet and must be dropped as a duplicate before anything
# of it is looked at. One that moves to a PSN the real sender has not used
# yet, or turns into an ACK, needs the connection id and the PSNs, which only
# a host that sees the wire has; Documentation/security.md says what such an
# attacker can do (stall a connection) and cannot (touch memory).
FIELDS = {
    "rsn": (COMMON + 1, 1),
    "paylen": (COMMON + 2, 2),
    "stream": (COMMON + 4, 4),
    "msn": (COMMON + 8, 4),
    "offset": (COMMON + 12, 4),
    "msglen": (COMMON + 16, 4),
    "rkey": (COMMON + 20, 4),
    "addr": (COMMON + 24, 8),
    "payload": (COMMON + 36, 4),
}


def hello(rng):
    epoch = rng.getrandbits(32) or 1
    to = 0 if rng.random() < 0.5 else rng.getrandbits(32)
    return struct.pack("!BBHIII", (4 << 4) | 4, 0, 0, to, 0, 0) + struct.pack("!II", epoch, 0)


def mutate(rng, pkt):
    b = bytearray(pkt)
    # A field the packet has. (Until 2026-12-02 a field past the end fell
    # back to bytes 8..12, the PSN: a near value made a new packet in the
    # window that took the real one's place, which this test does not claim
    # to stop; it stalled a message of the integrity run now and then.)
    fits = [f for f, (o, n) in FIELDS.items() if o + n <= len(b)]
    if not fits:
        return bytes(b)
    off, size = FIELDS[rng.choice(fits)]
    val = rng.getrandbits(8 * size)
    # Half the time a near value: a plausible neighbour, not noise.
    if rng.random() < 0.5:
        old = int.from_bytes(b[off:off + size], "big")
        val = (old + rng.choice([1, 2, 3, 64, 255, -1, -2])) % (1 << (8 * size))
    b[off:off + size] = val.to_bytes(size, "big")
    return bytes(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iface", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--stranger")
    ap.add_argument("--out", required=True)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--hello-rate", type=float, default=50.0)
    ap.add_argument("--modes", default="hello,garbage,truncated,mutate,replay,stranger")
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    modes = [m for m in a.modes.split(",") if m]
    others = [m for m in modes if m != "hello" and (m != "stranger" or a.stranger)]

    cap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    cap.bind((a.iface, 0))
    cap.setblocking(False)
    # Below the MetaRoCE paths' source ports (49152 and up): the injector
    # tells its own datagrams from the real ones by port.
    def low_socket(ip):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for _ in range(100):
            try:
                sock.bind((ip, rng.randrange(20000, 49152)))
                return sock
            except OSError:
                continue
        raise SystemExit("inject.py: no free port below 49152")

    tx = low_socket(a.src)
    stx = low_socket(a.stranger) if a.stranger else None
    src = socket.inet_aton(a.src)
    dst = socket.inet_aton(a.dst)
    # Its own datagrams cross IF too, from SRC to DST: never copy them (a
    # copy of a copy of garbage that passes for a hello would be counted as
    # the receiver's drop of something no real sender made).
    own = {s.getsockname()[1] for s in (tx, stx) if s is not None}

    ring = []
    old = []
    acked = {}  # path id -> DST's cumulative ack (first PSN not received)

    def delivered(p):
        """Whether DST acknowledged data packet P (hellos: always)."""
        if p[0] & 15 != 1:
            return True
        path, psn = struct.unpack("!H4xI", p[2:12])
        cum = acked.get(path)
        return cum is not None and 0 < (cum - psn) % (1 << 32) < (1 << 31)
    captured = 0
    sent = {m: 0 for m in modes}
    # Truncated copies sent that are long enough to name their connection:
    # the receiver must count each of them as drop_truncated.
    attributable = 0
    errors = 0
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    open(a.out + ".ready", "w").close()

    start = time.monotonic()
    next_hello = start
    next_other = start
    while not stop:
        # Take what the wire has: the real datagrams SRC sends to DST.
        for _ in range(256):
            try:
                f = cap.recv(65535)
            except (BlockingIOError, InterruptedError):
                break
            if len(f) < 42 or f[12:14] != b"\x08\x00" or f[23] != 17:
                continue
            ihl = (f[14] & 15) * 4
            u = 14 + ihl
            sport, dport = struct.unpack("!HH", f[u:u + 4])
            if dport != PORT or sport in own:
                continue
            payload = f[u + 8:]
            if f[26:30] == dst and f[30:34] == src:
                # DST's ACKs: how far it has received on each path.
                if len(payload) >= COMMON and payload[0] & 15 == 2:
                    path, cum = struct.unpack("!H4xI", payload[2:12])
                    acked[path] = cum
                continue
            if f[26:30] != src or f[30:34] != dst:
                continue
            # Data packets and hellos only (see FIELDS).
            if len(payload) < COMMON or payload[0] & 15 not in (1, 4):
                continue
            captured += 1
            ring.append(payload)
            if len(ring) > 512:
                old.append(ring.pop(0))
                if len(old) > 4096:
                    old.pop(0)
        now = time.monotonic()
        try:
            if "hello" in modes and a.hello_rate > 0 and now >= next_hello:
                tx.sendto(hello(rng), (a.dst, PORT))
                sent["hello"] += 1
                next_hello += 1.0 / a.hello_rate
            if others and a.rate > 0 and now >= next_other:
                next_other += 1.0 / a.rate
                m = rng.choice(others)
                sock = tx
                if m == "garbage" or (not ring and ("garbage" in modes or m == "stranger")):
                    # Nothing to copy yet: garbage, if garbage is wanted.
                    d = rng.randbytes(rng.randrange(0, 1500))
                    if m != "stranger":
                        m = "garbage"
                elif not ring:
                    d = None
                elif m == "truncated":
                    p = rng.choice(ring)
                    d = p[: rng.randrange(0, len(p))]
                elif m == "mutate":
                    done = [p for p in ring if delivered(p)]
                    d = mutate(rng, rng.choice(done)) if done else None
                elif m == "replay":
                    d = rng.choice(old) if old else rng.choice(ring)
                else:  # stranger
                    sock = stx
                    d = mutate(rng, rng.choice(ring)) if rng.random() < 0.5 else hello(rng)
                if m == "stranger" and not ring:
                    sock = stx
                if d is not None:
                    sock.sendto(d, (a.dst, PORT))
                    sent[m] = sent.get(m, 0) + 1
                    # 8 bytes: what the receiver's dispatch needs to find
                    # the connection (type and id: wire::peek).
                    if m == "truncated" and len(d) >= 8:
                        attributable += 1
        except OSError:
            errors += 1
        # Do not fall behind for ever after a stall.
        if now - next_other > 1.0:
            next_other = now
        if now - next_hello > 1.0:
            next_hello = now
        time.sleep(0.001)

    with open(a.out, "w") as o:
        kinds = " ".join(f"{k}={v}" for k, v in sent.items())
        o.write(f"sent {kinds} captured={captured} attributable={attributable} "
                f"errors={errors} seconds={time.monotonic() - start:.0f}\n")


if __name__ == "__main__":
    main()
