"""A STUNner config discovery service (CDS) server for the test suite, written from STUNner's
published API (pkg/config/api/stunner_openapi.yaml; see /work/shared/research/stunner.md 1.8):

  GET /api/v1/configs                     {"version":"v1","items":[StunnerConfig...]}
  GET /api/v1/configs/{namespace}         the same, filtered by namespace
  GET /api/v1/configs/{namespace}/{name}  StunnerConfig, or 404 {"code":404,"message":...}
  GET /api/v1/license                     {"enabledFeatures":[],"subscriptionType":"free",...}

With ?watch=true (and a WebSocket upgrade) the server sends the current matching config(s),
then one text message per update, each a full JSON config. It answers pings with pongs.
This is not the real operator (l7mp/stunner-gateway-operator): that was not run.

Use as a module (CdsServer) or stand-alone:
  python3 cds_server.py --port 13478 NAMESPACE/NAME=config.json ...
"""
import base64
import hashlib
import json
import os
import socket
import struct
import sys
import threading
from urllib.parse import parse_qs, urlsplit

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def frame(opcode, payload, fin=True):
    """An unmasked server frame."""
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([n])
    elif n < 65536:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
    return head + payload


class Conn:
    def __init__(self, sock, ident):
        self.sock = sock
        self.ident = ident  # "ns/name", "ns" or "" (all)
        self.lock = threading.Lock()
        self.closed = False

    def send(self, data):
        with self.lock:
            if self.closed:
                return
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed = True

    def send_text(self, text, fragment=0):
        data = text.encode()
        if fragment <= 0 or fragment >= len(data):
            self.send(frame(0x1, data))
            return
        parts = [data[i:i + fragment] for i in range(0, len(data), fragment)]
        out = b""
        for i, p in enumerate(parts):
            out += frame(0x1 if i == 0 else 0x0, p, fin=(i == len(parts) - 1))
        self.send(out)

    def close(self):
        with self.lock:
            self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def ws_upgrade(s, hdrs):
    """Answers a client's WebSocket upgrade (101 with its Sec-WebSocket-Accept); False when
    the request is no valid upgrade (nothing sent)."""
    key = hdrs.get("sec-websocket-key", "").encode()
    if (hdrs.get("upgrade", "").lower() != "websocket" or not key or
            hdrs.get("sec-websocket-version") != "13"):
        return False
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    s.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
              b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")
    return True


class CdsServer:
    pong_payload = None  # None: a pong echoes the ping's payload

    def __init__(self, port=0, host="127.0.0.1"):
        self.host, self.port = host, port
        self.configs = {}   # "ns/name" -> JSON text
        self.conns = []
        self.requests = []  # request targets seen, in order
        self.pings = 0
        self.ping_payloads = []
        self.pongs = []     # payloads of the pongs clients sent
        self.lock = threading.Lock()
        self.lsock = None
        self.fragment = 0   # > 0: send configs in text + continuation frames of this size

    # ---- control ----
    def start(self):
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind((self.host, self.port))
        self.port = self.lsock.getsockname()[1]
        self.lsock.listen(16)
        threading.Thread(target=self._accept, args=(self.lsock,), daemon=True).start()
        return self

    def stop(self):
        """Closes the listening socket and every connection (a server restart)."""
        if self.lsock is not None:
            try:
                self.lsock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.lsock.close()
            self.lsock = None
        with self.lock:
            conns, self.conns = self.conns, []
        for c in conns:
            c.close()

    def set_config(self, ident, config):
        """Stores the config of ident (a dict, or raw text pushed as is) and pushes it to
        every watcher of it."""
        text = config if isinstance(config, str) else json.dumps(config)
        with self.lock:
            self.configs[ident] = text
            conns = [c for c in self.conns if self._matches(c.ident, ident)]
        for c in conns:
            c.send_text(text, self.fragment)

    def ping_all(self, payload):
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            c.send(frame(0x9, payload))

    def watchers(self):
        with self.lock:
            return len([c for c in self.conns if not c.closed])

    # ---- serving ----
    @staticmethod
    def _matches(sel, ident):
        return sel == "" or sel == ident or ident.startswith(sel + "/")

    def _accept(self, lsock):
        while True:
            try:
                s, _ = lsock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    @staticmethod
    def _read_head(s):
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(4096)
            if not chunk or len(buf) > 65536:
                return None, b""
            buf += chunk
        head, rest = buf.split(b"\r\n\r\n", 1)
        return head.decode("latin-1"), rest

    @staticmethod
    def _reply(s, code, body):
        data = json.dumps(body).encode()
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(code, "Error")
        s.sendall(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (code, reason.encode(),
                                                                         len(data)) + data)

    def _serve(self, s):
        try:
            s.settimeout(60)
            head, rest = self._read_head(s)
            if head is None:
                return
            lines = head.split("\r\n")
            method, target, _ = (lines[0].split(" ") + ["", "", ""])[:3]
            hdrs = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                hdrs[k.strip().lower()] = v.strip()
            with self.lock:
                self.requests.append(target)
            url = urlsplit(target)
            q = parse_qs(url.query)
            parts = [p for p in url.path.split("/") if p]
            if method != "GET":
                return self._reply(s, 400, {"code": 400, "message": "GET only"})
            if parts == ["api", "v1", "license"]:
                return self._reply(s, 200, {"enabledFeatures": [], "subscriptionType": "free",
                                            "lastUpdated": "N/A", "lastError": ""})
            if parts[:3] != ["api", "v1", "configs"] or len(parts) > 5:
                return self._reply(s, 404, {"code": 404, "message": "not found"})
            sel = "/".join(parts[3:])
            watch = q.get("watch", ["false"])[0] == "true"
            if watch and hdrs.get("upgrade", "").lower() == "websocket":
                return self._watch(s, sel, hdrs, rest)
            with self.lock:
                items = [json.loads(t) for i, t in sorted(self.configs.items())
                         if self._matches(sel, i)]
                one = self.configs.get(sel)
            if len(parts) == 5:
                if one is None:
                    return self._reply(s, 404, {"code": 404, "message":
                                                "Config not found for ID %s" % sel})
                return self._reply(s, 200, json.loads(one))
            return self._reply(s, 200, {"version": "v1", "items": items})
        except (OSError, ValueError):
            pass
        finally:
            if not any(c.sock is s for c in self.conns):
                s.close()

    def _watch(self, s, sel, hdrs, rest):
        if not ws_upgrade(s, hdrs):
            return self._reply(s, 400, {"code": 400, "message": "bad WebSocket request"})
        c = Conn(s, sel)
        with self.lock:
            self.conns.append(c)
            current = [t for i, t in sorted(self.configs.items()) if self._matches(sel, i)]
        for t in current:
            c.send_text(t, self.fragment)
        s.settimeout(None)
        self._read_frames(c, rest)

    def _read_frames(self, c, buf):
        """Reads the client's (masked) frames: pong to ping, close to close."""
        while not c.closed:
            while len(buf) >= 6:
                b1 = buf[1]
                n = b1 & 0x7f
                off = 2
                if n == 126:
                    n, off = struct.unpack("!H", buf[2:4])[0], 4
                elif n == 127:
                    n, off = struct.unpack("!Q", buf[2:10])[0], 10
                if not b1 & 0x80:
                    return c.close()  # a client must mask (RFC 6455 5.1)
                if len(buf) < off + 4 + n:
                    break
                mask = buf[off:off + 4]
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(buf[off + 4:off + 4 + n]))
                op = buf[0] & 0x0f
                buf = buf[off + 4 + n:]
                if op == 0x9:
                    with self.lock:
                        self.pings += 1
                        self.ping_payloads.append(payload)
                    c.send(frame(0xA, payload if self.pong_payload is None
                                 else self.pong_payload))
                elif op == 0xA:
                    with self.lock:
                        self.pongs.append(payload)
                elif op == 0x8:
                    c.send(frame(0x8, payload[:2]))
                    return c.close()
            try:
                chunk = c.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                return c.close()
            buf += chunk


def main(argv):
    port = 13478
    srv_args = []
    i = 0
    while i < len(argv):
        if argv[i] == "--port":
            port = int(argv[i + 1])
            i += 2
        else:
            srv_args.append(argv[i])
            i += 1
    srv = CdsServer(port).start()
    for a in srv_args:
        ident, _, path = a.partition("=")
        with open(path) as f:
            srv.set_config(ident, f.read())
    print("CDS server on 127.0.0.1:%d" % srv.port, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1:])
