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
import json
import os
import sys
from urllib.parse import parse_qs, urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cds_server import CdsServer, Conn, frame, ws_upgrade  # noqa: E402

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


def message_frames(data):
    """How gorilla's NextWriter splits a message with a 1024-byte write buffer."""
    parts = [data[i:i + WRITE_BUFFER] for i in range(0, len(data), WRITE_BUFFER)] or [b""]
    return b"".join(frame(0x1 if i == 0 else 0x0, p, fin=(i == len(parts) - 1))
                    for i, p in enumerate(parts))


class Stream(Conn):
    """One watch stream: Conn plus the request it came with."""

    def __init__(self, sock, topic, target, headers):
        Conn.__init__(self, sock, topic)
        self.topic, self.target, self.headers = topic, target, headers

    def close(self):
        """closeConn: an empty close frame, then the socket goes."""
        self.send(frame(0x8, b""))
        Conn.close(self)


class OperatorCds(CdsServer):
    """start() and stop() (a server restart) are CdsServer's; so is the reader of the
    client's frames, with the operator's pong payload."""
    pong_payload = b"keepalive"

    def __init__(self, port=0, host="127.0.0.1"):
        CdsServer.__init__(self, port, host)
        self.store = {}        # "ns/name" -> config (dict), the ConfigStore
        self.upgrades = 0      # watch streams opened

    def watching(self):
        with self.lock:
            return [s for s in self.conns if not s.closed]

    # ---- the operator's side: Server.UpdateConfig ----
    def update_config(self, configs):
        """configs: {"ns/name": config}. Upserts changed ones, deletes missing ones."""
        with self.lock:
            old = dict(self.store)
        for ident in old:
            if ident not in configs:
                self._delete(ident)
        for ident, conf in configs.items():
            if old.get(ident) != conf:
                self._upsert(ident, conf)

    def _push(self, ident, conf):
        with self.lock:
            subs = [s for s in self.conns if self._matches(s.topic, ident)]
        for s in subs:
            s.send(message_frames(go_json(conf).encode()))

    def _upsert(self, ident, conf):
        with self.lock:
            if self.store.get(ident) == conf:
                return
            self.store[ident] = conf
        self._push(ident, conf)

    def _delete(self, ident):
        with self.lock:
            self.store.pop(ident, None)
        self._push(ident, zero_config(ident))

    @staticmethod
    def _matches(topic, ident):
        return topic == "all" or topic == ident or (topic.endswith("/*") and
                                                    ident.startswith(topic[:-1]))

    @staticmethod
    def _reply(s, code, body):
        data = go_json(body).encode() + b"\n"
        reason = {200: "OK", 404: "Not Found", 400: "Bad Request"}.get(code, "Error")
        s.sendall(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % (code, reason.encode(), len(data)) + data)
        s.close()

    def _serve(self, s):
        try:
            s.settimeout(30)
            head, rest = self._read_head(s)
        except OSError:
            head = None
        if head is None:
            return s.close()
        lines = head.split("\r\n")
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
        with self.lock:
            items = [c for i, c in sorted(self.store.items()) if self._matches(topic, i)]
        if not watch and len(parts) == 5:
            if not items:
                return self._reply(s, 404, {"code": 404, "message":
                                            "Config not found for ID " + topic})
            return self._reply(s, 200, items[0])
        if not watch:
            return self._reply(s, 200, {"version": "v1", "items": items})
        if not ws_upgrade(s, hdrs):
            return self._reply(s, 400, {"code": 400, "message": "Bad Request"})
        st = Stream(s, topic, target, hdrs)
        with self.lock:
            self.conns.append(st)
            self.upgrades += 1
        for c in items:  # subscribeToTopic sends the current configs first
            st.send(message_frames(go_json(c).encode()))
        s.settimeout(None)
        self._read_frames(st, rest)
