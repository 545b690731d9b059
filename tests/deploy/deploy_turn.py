"""tests/deploy/deploy_turn.py: what the deploy tests share: a TURN client (python3-aioice), an echo peer, REST credentials, skips.

Run as a script it holds one allocation for a test that drives turngated from outside the
process (a booted systemd, a container): `deploy_turn.py HOST PORT SECRET` allocates, relays a
first round trip to its own echo peer and prints `ready`, then reads commands on stdin:
`rt TAG` relays one more round trip (prints `ok TAG` or `fail TAG REASON`), `close` ends the
allocation (Refresh with LIFETIME 0) and exits.
"""
import asyncio
import base64
import hashlib
import hmac
import os
import shutil
import subprocess
import sys
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SECRET = "deploy-test-secret"


def credential(secret, name):
    """A TURN REST API credential (EXPIRY:NAME, base64 HMAC-SHA1) valid for one hour."""
    user = f"{int(time.time()) + 3600}:{name}"
    mac = hmac.new(secret.encode(), user.encode(), hashlib.sha1).digest()
    return user, base64.b64encode(mac).decode()


class Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.transport.sendto(data, addr)


class Client(asyncio.DatagramProtocol):
    def __init__(self):
        self.queue = asyncio.Queue()

    def datagram_received(self, data, addr):
        self.queue.put_nowait(data)


async def round_trip(transport, client, peer, tag):
    """Sends a tagged payload to peer through the allocation until it comes back (10 tries)."""
    payload = f"{tag}-{os.urandom(4).hex()}".encode()
    for _ in range(10):  # UDP: resend until echoed, bounded
        transport.sendto(payload, peer)
        try:
            while True:
                data = await asyncio.wait_for(client.queue.get(), 2)
                if data == payload:
                    return
        except asyncio.TimeoutError:
            continue
    raise AssertionError(f"no relayed echo for {tag}")


async def hold(host, port, secret):
    from aioice import turn  # here, so that a test importing this module can skip without it

    loop = asyncio.get_running_loop()
    echo_t, _ = await loop.create_datagram_endpoint(Echo, local_addr=(host, 0))
    peer = echo_t.get_extra_info("sockname")
    user, password = credential(secret, "holder")
    transport, client = await turn.create_turn_endpoint(
        Client, server_addr=(host, port), username=user, password=password)
    await round_trip(transport, client, peer, "first")
    print("ready", flush=True)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = (await reader.readline()).decode().split()
        if not line or line[0] == "close":
            break
        try:
            await round_trip(transport, client, peer, line[1])
            print(f"ok {line[1]}", flush=True)
        except AssertionError as e:
            print(f"fail {line[1]} {e}", flush=True)
    transport.close()
    await asyncio.sleep(0.5)  # let the Refresh with LIFETIME 0 leave
    echo_t.close()


def unavailable(reason):
    """A missing tool: a failure in CI, a printed skip elsewhere."""
    if os.environ.get("CI") == "true":
        print(f"FAIL: {reason} (CI=true: the deploy tests must run)")
        sys.exit(1)
    print(f"SKIP: {reason}")
    sys.exit(77)


def require(why_root, tools):
    """Root, each of tools on PATH and python3-aioice, or unavailable() with the reason."""
    if os.geteuid() != 0:
        unavailable(f"needs root ({why_root})")
    for tool in tools:
        if shutil.which(tool) is None:
            unavailable(f"{tool} not found (scripts/setup.sh installs it)")
    try:
        import aioice  # noqa: F401
    except ImportError:
        unavailable("python3-aioice not installed")


def cached(artifact):
    """deploy_cache.sh ARTIFACT: the cached tree or image name, built on first use; exits
    with a failure when it cannot be built."""
    t = time.monotonic()
    r = subprocess.run([os.path.join(HERE, "deploy_cache.sh"), artifact], stdout=subprocess.PIPE,
                       text=True)
    if r.returncode != 0:
        print(f"FAIL: deploy_cache.sh {artifact} failed")
        sys.exit(1)
    print(f"{artifact}: {r.stdout.strip()} ready in {time.monotonic() - t:.1f} s", flush=True)
    return r.stdout.strip()


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def write_yaml(path, cfg):
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        yaml.safe_dump(cfg, fh)
    os.rename(path + ".tmp", path)


def step(name):
    print(f"--- {name}", flush=True)
    return time.monotonic()


class Holder:
    """A TURN allocation held by this script in a child; wrap(argv) puts it in a network namespace."""

    def __init__(self, wrap, port):
        self.p = subprocess.Popen(
            wrap([sys.executable, os.path.join(HERE, "deploy_turn.py"), "127.0.0.1",
                  str(port), SECRET]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline().strip()
        check(line == "ready", f"holder: {line!r}")

    def round_trip(self, tag):
        self.p.stdin.write(f"rt {tag}\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline().strip()
        check(line == f"ok {tag}", f"held allocation, round trip {tag}: {line!r}")

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.write("close\n")
            self.p.stdin.flush()
            self.p.wait(timeout=30)



if __name__ == "__main__":
    asyncio.run(hold(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
