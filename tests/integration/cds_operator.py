"""A config discovery server that behaves as the STUNner gateway operator's, for the tests.

Written from the server code the operator runs (l7mp/stunner-gateway-operator
internal/config/server.go wraps l7mp/stunner pkg/config/server: server.go, middleware.go,
handler.go, config_store.go; both read at the commits named in docs/production.md), not
from turngate's client:

- GET /api/v1/configs/{ns}/{name} without watch: 200 and the config, or 404
  {"code":404,"message":"Config not found for ID ns/name"}; /api/v1/configs[/{ns}]:
  {"version":"v1","items":[...]}; /api/v1/license: the free-tier status.
- With watch=true the request is upgraded (gorilla Upgrader, 1024-byte buffers) whether or
  not the identity has a config: nothing is sent until the operator renders one. The
  current config, then every change, goes out as one text message, which gorilla writes in
  frames of at most 1024 payload bytes (a text frame, then continuation frames).
- UpdateConfig: a config equal to the stored one is not sent again (Upsert's DeepEqual);
  an identity missing from the update is deleted, and its watchers get ZeroConfig(id)
  as Go's encoding/json writes it (omitempty: no listeners, no clusters).
- The server answers a ping with a pong carrying "keepalive" and never pings itself; a read
  error or a close frame ends the stream with an empty close frame.
"""
import base64
import hashlib
import json
import socket
import struct
import threading
from urllib.parse import parse_qs, urlsplit

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
WRITE_BUFFER = 1024  # gorilla Upgrader WriteBufferSize in pkg/config/server/middleware.go


def go_json(obj):
    """encoding/json's compact form (keys of Go maps sorted; struct fields in order)."""
    return json.dumps(obj, separators=(",", ":"))


def zero_config(ident):
    """pkg/config/client ZeroConfig(id), marshalled without Validate()."""
    return {"version": "v1", "admin": {"name": ident},
            "auth": {"type": "static", "realm": "stunner.l7mp.io",
                     "credentials": {"password": "dummy-password",
                                     "username": "dummy-username"}}}


def frame(opcode, payload, fin=True):
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([n])
    elif n < 65536:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
    return head + payload


def message_frames(data):
    """How gorilla's NextWriter splits a message with a 1024-byte write buffer."""
    parts = [data[i:i + WRITE_BUFFER] for i in range(0, len(data), WRITE_BUFFER)] or [b""]
    return b"".join(frame(0x1 if i == 0 else 0x0, p, fin=(i == len(parts) - 1))
                    for i, p in enumerate(parts))


class Stream:
    def __init__(self, sock, topic, target, headers):
        self.sock, self.topic, self.target, self.headers = sock, topic, target, headers
        self.lock = threading.Lock()
        self.closed = False

    def write(self, data):
        with self.lock:
            if self.closed:
                return
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed = True

    def close(self):
        """closeConn: an empty close frame, then the socket goes."""
        self.write(frame(0x8, b""))
        with self.lock:
            self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class OperatorCds:
    def __init__(self, port=0, host="127.0.0.1"):
        self.host, self.port = host, port
        self.configs = {}      # "ns/name" -> config (dict), the ConfigStore
        self.streams = []
        self.pings = []        # payloads of the client's pings
        self.upgrades = 0      # watch streams opened
        self.lock = threading.Lock()
        self.lsock = None

    def start(self):
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind((self.host, self.port))
        self.port = self.lsock.getsockname()[1]
        self.lsock.listen(16)
        threading.Thread(target=self._accept, args=(self.lsock,), daemon=True).start()
        return self

    def stop(self):
        if self.lsock is not None:
            try:
                self.lsock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.lsock.close()
            self.lsock = None
        with self.lock:
            streams, self.streams = self.streams, []
        for s in streams:
            s.close()

    def watching(self):
        with self.lock:
            return [s for s in self.streams if not s.closed]

    # ---- the operator's side: Server.UpdateConfig ----
    def update_config(self, configs):
        """configs: {"ns/name": config}. Upserts changed ones, deletes missing ones."""
        with self.lock:
            old = dict(self.configs)
        for ident in old:
            if ident not in configs:
                self._delete(ident)
        for ident, conf in configs.items():
            if old.get(ident) != conf:
                self._upsert(ident, conf)

    def _upsert(self, ident, conf):
        with self.lock:
            if self.configs.get(ident) == conf:
                return
            self.configs[ident] = conf
            subs = [s for s in self.streams if self._matches(s.topic, ident)]
        for s in subs:
            s.write(message_frames(go_json(conf).encode()))

    def _delete(self, ident):
        with self.lock:
            self.configs.pop(ident, None)
            subs = [s for s in self.streams if self._matches(s.topic, ident)]
        for s in subs:
            s.write(message_frames(go_json(zero_config(ident)).encode()))

    @staticmethod
    def _matches(topic, ident):
        return topic == "all" or topic == ident or (topic.endswith("/*") and
                                                    ident.startswith(topic[:-1]))

    # ---- serving ----
    def _accept(self, lsock):
        while True:
            try:
                s, _ = lsock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    @staticmethod
    def _reply(s, code, body):
        data = go_json(body).encode() + b"\n"
        reason = {200: "OK", 404: "Not Found", 400: "Bad Request"}.get(code, "Error")
        s.sendall(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % (code, reason.encode(), len(data)) + data)
        s.close()

    def _serve(self, s):
        buf = b""
        try:
            s.settimeout(30)
            while b"\r\n\r\n" not in buf:
                chunk = s.recv(4096)
                if not chunk:
                    return s.close()
                buf += chunk
        except OSError:
            return s.close()
        head, rest = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        target = (lines[0].split(" ") + ["", ""])[1]
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        url = urlsplit(target)
        watch = parse_qs(url.query).get("watch", ["false"])[0] == "true"
        parts = [p for p in url.path.split("/") if p]
        if parts == ["api", "v1", "license"]:
            return self._reply(s, 200, {"enabledFeatures": [], "subscriptionType": "free",
                                        "lastUpdated": "N/A", "lastError": ""})
        if parts[:3] != ["api", "v1", "configs"] or len(parts) > 5:
            return self._reply(s, 404, {"code": 404, "message": "not found"})
        topic = "/".join(parts[3:5]) if len(parts) == 5 else \
            (parts[3] + "/*" if len(parts) == 4 else "all")
        if not watch:
            with self.lock:
                items = [c for i, c in sorted(self.configs.items())
                         if self._matches(topic, i)]
            if len(parts) == 5:
                if not items:
                    return self._reply(s, 404, {"code": 404, "message":
                                                "Config not found for ID " + topic})
                return self._reply(s, 200, items[0])
            return self._reply(s, 200, {"version": "v1", "items": items})
        key = hdrs.get("sec-websocket-key", "").encode()
        if (hdrs.get("upgrade", "").lower() != "websocket" or not key or
                hdrs.get("sec-websocket-version") != "13"):
            return self._reply(s, 400, {"code": 400, "message": "Bad Request"})
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
        s.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")
        st = Stream(s, topic, target, hdrs)
        with self.lock:
            self.streams.append(st)
            self.upgrades += 1
            current = [c for i, c in sorted(self.configs.items()) if self._matches(topic, i)]
        for c in current:  # subscribeToTopic sends the current configs first
            st.write(message_frames(go_json(c).encode()))
        s.settimeout(None)
        self._read(st, rest)

    def _read(self, st, buf):
        """The server's reader goroutine: ping -> pong "keepalive"; anything else that
        fails (a close frame, EOF, an unmasked frame) closes the stream."""
        while not st.closed:
            while len(buf) >= 6:
                n, off = buf[1] & 0x7f, 2
                if n == 126:
                    n, off = struct.unpack("!H", buf[2:4])[0], 4
                elif n == 127:
                    n, off = struct.unpack("!Q", buf[2:10])[0], 10
                if not buf[1] & 0x80:
                    return st.close()
                if len(buf) < off + 4 + n:
                    break
                mask = buf[off:off + 4]
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(buf[off + 4:off + 4 + n]))
                op = buf[0] & 0x0f
                buf = buf[off + 4 + n:]
                if op == 0x9:
                    with self.lock:
                        self.pings.append(payload)
                    st.write(frame(0xA, b"keepalive"))
                elif op == 0x8:
                    return st.close()
            try:
                chunk = st.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                return st.close()
            buf += chunk
