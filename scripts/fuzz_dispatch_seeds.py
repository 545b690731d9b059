#!/usr/bin/python3
"""Writes the seed inputs of fuzz_dispatch (record format in fuzz/fuzz_dispatch.c) to a
directory: python3 scripts/fuzz_dispatch_seeds.py DIR. The checked-in corpus is these seeds grown by
fuzzing and minimized with -merge=1."""
import os
import socket
import struct
import sys

COOKIE = 0x2112A442
BINDING, ALLOCATE, REFRESH, SEND, CREATE_PERM, CHANNEL_BIND = 1, 3, 4, 6, 8, 9
CONNECT, CONNECTION_BIND = 0x00A, 0x00B
REQUEST, INDICATION = 0, 1
SIGN, FP, MI256, PWSHA, BOB, NOCRED, JUMP, TWICE = (1 << i for i in range(8))
STATIC, REST, OPEN = 0, 4, 8          # sel bits 2-3: listener
JUMP_301, JUMP_601, JUMP_3601 = 7 << 4, 10 << 4, 14 << 4


def msg_type(method, cls):
    return ((method & 0xF80) << 2) | ((method & 0x70) << 1) | (method & 0xF) | \
        ((cls & 2) << 7) | ((cls & 1) << 4)


def attr(t, v):
    return struct.pack('!HH', t, len(v)) + v + b'\0' * (-len(v) % 4)


def xor_peer(ip, port, t=0x0012):
    a = bytes(int(x) for x in ip.split('.'))
    x = struct.unpack('!I', a)[0] ^ COOKIE
    return attr(t, struct.pack('!BBHI', 0, 1, port ^ (COOKIE >> 16), x))


def xor_peer6(ip, port):
    """IPv6 XOR-PEER-ADDRESS: XORed with cookie and tid, so built once the tid is known."""
    def build(tid):
        key = struct.pack('!I', COOKIE) + tid
        a = bytes(x ^ k for x, k in zip(socket.inet_pton(socket.AF_INET6, ip), key))
        return attr(0x0012, struct.pack('!BBH', 0, 2, port ^ (COOKIE >> 16)) + a)
    return build


_tid = [0]


def stun(method, attrs=b'', cls=REQUEST):
    _tid[0] += 1
    tid = struct.pack('!4sQ', b'fzdp', _tid[0])
    if isinstance(attrs, list):
        attrs = b''.join(a(tid) if callable(a) else a for a in attrs)
    return struct.pack('!HHI', msg_type(method, cls), len(attrs), COOKIE) + tid + attrs


def rec(sel, flags, body):
    return struct.pack('!BBH', sel, flags, len(body)) + body


TRANSPORT = attr(0x0019, b'\x11\0\0\0')
PEER = xor_peer('127.0.0.9', 40000)
PEER2 = xor_peer('127.0.0.10', 40001)


def lifetime(s):
    return attr(0x000D, struct.pack('!I', s))


def chan(n):
    return attr(0x000C, struct.pack('!HH', n, 0))


def chandata(n, data):
    return struct.pack('!HH', n, len(data)) + data + b'\0' * (-len(data) % 4)


def session(sel, f):
    """Allocate, permission, channel, data both ways, refresh, delete."""
    return b''.join([
        rec(sel, f, stun(ALLOCATE, TRANSPORT)),
        rec(sel, f, stun(CREATE_PERM, PEER)),
        rec(sel, f, stun(CHANNEL_BIND, chan(0x4000) + PEER2)),
        rec(sel, 0, chandata(0x4000, b'hello peer')),
        rec(sel, 0, stun(SEND, PEER + attr(0x0013, b'data'), INDICATION)),
        rec(sel, f, stun(REFRESH, lifetime(900))),
        rec(sel, f, stun(REFRESH, lifetime(0))),
    ])


SEEDS = {
    'binding': rec(0, 0, stun(BINDING)) + rec(1, FP, stun(BINDING)),
    'alloc_unauth': rec(0, 0, stun(ALLOCATE, TRANSPORT)),
    'alloc_unauth_rest_fp': rec(REST, FP, stun(ALLOCATE, TRANSPORT)),
    'session_static': session(STATIC, SIGN),
    'session_rest': session(REST | 1, SIGN | FP),
    'session_sha256': session(STATIC | 2, SIGN | MI256 | PWSHA | FP),
    'session_mi256_md5key': session(REST | 3, SIGN | MI256 | BOB),
    'open_listener': rec(OPEN, 0, stun(BINDING)) + rec(OPEN, SIGN, stun(ALLOCATE, TRANSPORT)),
    'even_port_reserve': rec(0, SIGN, stun(ALLOCATE, TRANSPORT + attr(0x0018, b'\x80'))) +
    rec(1, SIGN, stun(ALLOCATE, TRANSPORT + attr(0x0022, b'\0' * 8))) +
    rec(JUMP_601, JUMP, b''),
    'dual_stack': rec(0, SIGN, stun(ALLOCATE, TRANSPORT + attr(0x8000, b'\x02\0\0\0'))) +
    rec(0, SIGN, stun(REFRESH, attr(0x0017, b'\x02\0\0\0'))) +
    rec(1, SIGN, stun(ALLOCATE, TRANSPORT + attr(0x0017, b'\x02\0\0\0') + attr(0x001A, b''))),
    'expiry': rec(0, SIGN, stun(ALLOCATE, TRANSPORT)) +
    rec(JUMP_301, SIGN | JUMP, stun(CREATE_PERM, PEER)) +
    rec(0, SIGN, stun(CHANNEL_BIND, chan(0x4001) + PEER)) +
    rec(JUMP_601, JUMP, chandata(0x4001, b'late')) +
    rec(JUMP_3601, JUMP, stun(SEND, PEER + attr(0x0013, b'x'), INDICATION)),
    'retransmit': rec(0, SIGN | TWICE, stun(ALLOCATE, TRANSPORT + lifetime(30))),
    'quota': b''.join(rec(i, SIGN, stun(ALLOCATE, TRANSPORT)) for i in range(4)),
    'mismatch': rec(0, SIGN, stun(ALLOCATE, TRANSPORT)) + rec(0, SIGN, stun(ALLOCATE, TRANSPORT)) +
    rec(0, SIGN | BOB, stun(REFRESH)) + rec(1, SIGN, stun(REFRESH)),
    'bad_channels': rec(0, SIGN, stun(ALLOCATE, TRANSPORT)) +
    rec(0, SIGN, stun(CHANNEL_BIND, chan(0x3000) + PEER)) +
    rec(0, SIGN, stun(CHANNEL_BIND, chan(0x5000) + PEER)) +
    rec(0, SIGN, stun(CHANNEL_BIND, chan(0x4002))) +
    rec(0, SIGN, stun(CREATE_PERM, xor_peer('10.0.0.1', 5000))) +
    rec(0, SIGN, stun(CHANNEL_BIND, chan(0x4003) + PEER)) +
    rec(0, SIGN, stun(CHANNEL_BIND, chan(0x4003) + PEER2)) +
    rec(0, 0, chandata(0x5003, b'strict mode')),
    'malformed': rec(0, 0, b'\0\x01\0') + rec(0, 0, stun(BINDING)[:19]) +
    rec(0, 0, b'\0\x01\0\0' + b'\0' * 16) +
    rec(0, 0, stun(BINDING, attr(0x7777, b'u'))) +
    rec(0, SIGN, stun(ALLOCATE, attr(0x0019, b'\x06\0\0\0'))) +
    rec(0, SIGN, stun(ALLOCATE)) + rec(0, 0, stun(0x0FF, b'')) +
    rec(0, FP, stun(BINDING, cls=2)) + rec(0, 0, chandata(0x4000, b'')[:3]),
    'nocred': rec(0, SIGN | NOCRED, stun(ALLOCATE, TRANSPORT + attr(0x0006, b'alice'))) +
    rec(0, 0, stun(ALLOCATE, TRANSPORT + attr(0x0006, b'alice') + attr(0x0008, b'\0' * 20))),
    'dual_stack_v6_peer': rec(0, SIGN, stun(ALLOCATE, TRANSPORT + attr(0x8000, b'\x02\0\0\0'))) +
    rec(0, SIGN, stun(CREATE_PERM, [xor_peer6('::1', 40000)])) +
    rec(0, SIGN, stun(CHANNEL_BIND, [chan(0x4010), xor_peer6('::1', 40002)])) +
    rec(0, 0, stun(SEND, [xor_peer6('::1', 40000), attr(0x0013, b'v6 data')], INDICATION)) +
    rec(0, 0, chandata(0x4010, b'v6 channel')) +
    rec(1, SIGN, stun(ALLOCATE, TRANSPORT)) +
    rec(1, SIGN, stun(CREATE_PERM, [xor_peer6('::1', 40000)])) +
    rec(1, 0, stun(SEND, [xor_peer6('::1', 40000), attr(0x0013, b'x')], INDICATION)),
    'perm_limit': rec(0, SIGN, stun(ALLOCATE, TRANSPORT)) +
    b''.join(rec(0, SIGN, stun(CREATE_PERM, xor_peer('127.0.0.%d' % (20 + i), 1000)))
             for i in range(5)) +
    b''.join(rec(0, SIGN, stun(CHANNEL_BIND,
                               chan(0x4020 + i) + xor_peer('127.0.0.%d' % (30 + i), 1000)))
             for i in range(5)),
    'resv_redeem': rec(0, SIGN, stun(ALLOCATE, TRANSPORT + attr(0x0018, b'\x80'))) +
    rec(1, SIGN, stun(ALLOCATE, TRANSPORT + attr(0x0022, b'\0' * 8))) +
    rec(REST | 2, SIGN, stun(ALLOCATE, TRANSPORT + attr(0x0018, b'\x80'))) +
    rec(3, SIGN, stun(ALLOCATE, TRANSPORT + attr(0x0022, b'\0' * 8))),
    'drain': rec(0, TWICE, b'') + rec(0, SIGN, stun(ALLOCATE, TRANSPORT)) + rec(0, TWICE, b'') +
    rec(0, SIGN, stun(ALLOCATE, TRANSPORT)),
    # alice x3 and bob on the static listener, alice x2 on the REST one: 6, the total quota
    'total_quota': b''.join(rec(i, SIGN | (BOB if i == 3 else 0), stun(ALLOCATE, TRANSPORT))
                            for i in range(4)) +
    b''.join(rec(REST | i, SIGN, stun(ALLOCATE, TRANSPORT)) for i in range(3)),
    # regression: a ChannelBind or CreatePermission that fails for want of a permission slot
    # (508) left a channel bound, or the first peers' permissions installed
    'failed_bind_state': rec(0, SIGN, stun(ALLOCATE, TRANSPORT)) +
    b''.join(rec(0, SIGN, stun(CREATE_PERM, xor_peer('127.0.0.%d' % (20 + i), 1000)))
             for i in range(3)) +
    rec(0, SIGN, stun(CREATE_PERM, xor_peer('127.0.0.40', 1) + xor_peer('127.0.0.41', 1))) +
    rec(0, SIGN, stun(CREATE_PERM, xor_peer('127.0.0.42', 1))) +
    rec(0, SIGN, stun(CHANNEL_BIND, chan(0x4030) + xor_peer('127.0.0.50', 1000))) +
    rec(0, SIGN, stun(CHANNEL_BIND, chan(0x4030) + xor_peer('127.0.0.20', 1000))),
    'bad_fingerprint': rec(0, 0, stun(BINDING, attr(0x8028, b'\0\0\0\0'))),
    # RFC 6062 over UDP: Allocate TCP, Connect, ConnectionBind all get 400 (unauthenticated
    # first, then signed, with and without an allocation; a CONNECTION-ID of another length)
    'rfc6062_udp': rec(0, 0, stun(CONNECT, PEER)) +
    rec(0, SIGN, stun(ALLOCATE, attr(0x0019, b'\x06\0\0\0'))) +
    rec(0, SIGN, stun(CONNECT, PEER)) +
    rec(0, SIGN, stun(ALLOCATE, TRANSPORT)) +
    rec(0, SIGN, stun(CONNECT, PEER)) + rec(0, SIGN, stun(CONNECT)) +
    rec(0, SIGN, stun(CONNECTION_BIND, attr(0x002A, b'\0\0\0\x01'))) +
    rec(1, SIGN, stun(CONNECTION_BIND, attr(0x002A, b'\0\0\x01'))) +
    rec(1, 0, stun(CONNECTION_BIND, attr(0x002A, b'\0\0\0\x01'))),
}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, 'seed_' + name), 'wb') as f:
            f.write(data)


if __name__ == '__main__':
    main()
