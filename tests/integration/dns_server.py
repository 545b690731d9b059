"""A resolver and a DNS server of a test's own, for the tests that run in mount and network
namespaces of their own (root): test_dns_refresh.py, test_session_records_dns.py."""
import os
import socket
import struct
import subprocess
import threading

DNS_IP = "127.0.0.53"


class Resolver:
    """/etc/resolv.conf (nameserver DNS_IP, timeout seconds, one attempt), /etc/nsswitch.conf
    ("hosts: files dns") and /etc/hosts (localhost) bind-mounted from files written in d
    (the test's own mount namespace). hosts() rewrites /etc/hosts in place (same inode,
    which the bind mount shows)."""

    def __init__(self, d, timeout):
        self.d = d
        for name, text in (("resolv.conf", "nameserver %s\noptions timeout:%d attempts:1\n"
                            % (DNS_IP, timeout)), ("nsswitch.conf", "hosts: files dns\n"),
                           ("hosts", "127.0.0.1 localhost\n")):
            path = os.path.join(d, name)
            with open(path, "w") as f:
                f.write(text)
            subprocess.run(["mount", "--bind", path, "/etc/" + name], check=True)

    def hosts(self, entries):
        """/etc/hosts: localhost and entries ({name: address})."""
        with open(os.path.join(self.d, "hosts"), "r+") as f:
            f.truncate(0)
            f.write("127.0.0.1 localhost\n" + "".join("%s %s\n" % (ip, name)
                                                      for name, ip in entries.items()))


def wire_name(name):
    """A domain name as a DNS question carries it (lower case, no root label)."""
    return b"".join(bytes([len(label)]) + label.encode() for label in name.lower().split("."))


class DnsServer:
    """A DNS server on DNS_IP:53, served by a thread until close(). A query gets NXDOMAIN
    while nxdomain is set; otherwise the A record of its name in names ({name: IPv4
    address}; other names and types: no records), or no answer at all when names is None
    (a DNS outage). With hold=True every query is kept unanswered (in held) until
    release(), which answers them and every later one."""

    def __init__(self, names=None, hold=False):
        self.names = None if names is None else {wire_name(n): ip for n, ip in names.items()}
        self.nxdomain = False
        self.released = not hold
        self.held = []
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((DNS_IP, 53))
        self.sock.settimeout(0.2)
        self.stop = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def reply(self, q):
        """The answer to query q, or None for none."""
        if len(q) <= 12:
            return None
        i = 12
        while i < len(q) and q[i] != 0:
            i += q[i] + 1
        question = q[12:i + 5]
        if self.nxdomain:
            return q[:2] + struct.pack("!HHHHH", 0x8183, 1, 0, 0, 0) + question
        if self.names is None:
            return None
        qtype = struct.unpack("!H", q[i + 1:i + 3])[0] if i + 3 <= len(q) else 0
        ip = self.names.get(q[12:i].lower()) if qtype == 1 else None
        if ip is None:
            return q[:2] + struct.pack("!HHHHH", 0x8180, 1, 0, 0, 0) + question
        return (q[:2] + struct.pack("!HHHHH", 0x8180, 1, 1, 0, 0) + question +
                struct.pack("!HHHIH", 0xC00C, 1, 1, 60, 4) + socket.inet_aton(ip))

    def _answer(self, q, src):
        r = self.reply(q)
        if r is not None:
            self.sock.sendto(r, src)

    def serve(self):
        while not self.stop:
            try:
                q, src = self.sock.recvfrom(2048)
            except OSError:
                continue
            with self.lock:
                if not self.released:
                    self.held.append((q, src))
                    continue
            self._answer(q, src)

    def release(self):
        with self.lock:
            self.released = True
            for q, src in self.held:
                self._answer(q, src)

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()
