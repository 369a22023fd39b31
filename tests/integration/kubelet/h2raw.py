"""A deliberately naive HTTP/2 client that writes frames byte by byte (RFC
9113), so tests can send what no real gRPC stack would: broken prefaces,
frames on the wrong stream, bad HPACK, oversized frames, lying gRPC length
prefixes.  It reads back frames without decoding HPACK (a peer's answer is
judged by frame types, stream IDs and error codes).
"""
import socket
import struct
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIO = 0x1, 0x1, 0x4, 0x8, 0x20

# RFC 9113 section 7
ERROR_CODES = {0: "NO_ERROR", 1: "PROTOCOL_ERROR", 2: "INTERNAL_ERROR", 3: "FLOW_CONTROL_ERROR",
               4: "SETTINGS_TIMEOUT", 5: "STREAM_CLOSED", 6: "FRAME_SIZE_ERROR", 7: "REFUSED_STREAM",
               8: "CANCEL", 9: "COMPRESSION_ERROR", 10: "CONNECT_ERROR", 11: "ENHANCE_YOUR_CALM",
               12: "INADEQUATE_SECURITY", 13: "HTTP_1_1_REQUIRED"}


def frame(ftype, flags, stream, payload=b"", length=None):
    """One frame; `length` lets a test lie about the payload size."""
    n = len(payload) if length is None else length
    return struct.pack(">I", n)[1:] + bytes([ftype, flags]) + struct.pack(">I", stream & 0x7FFFFFFF) + payload


def settings(pairs=(), ack=False):
    return frame(SETTINGS, ACK if ack else 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


def hpack_literal(headers):
    """A header block of literals without indexing and without Huffman
    (RFC 7541 6.2.2): always valid, no state to keep."""
    out = bytearray()
    for name, value in headers:
        out.append(0x00)  # literal header field without indexing, new name
        for s in (name, value):
            b = s.encode()
            if len(b) < 127:
                out.append(len(b))
            else:  # 7-bit prefix integer, continued in 7-bit groups
                out.append(0x7F)
                n = len(b) - 127
                while n >= 128:
                    out.append((n & 0x7F) | 0x80)
                    n >>= 7
                out.append(n)
            out += b
    return bytes(out)


def grpc_headers(path, authority="localhost", extra=()):
    return [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", authority),
            ("content-type", "application/grpc"), ("te", "trailers"), *extra]


def grpc_message(payload, compressed=False, length=None):
    n = len(payload) if length is None else length
    return bytes([1 if compressed else 0]) + struct.pack(">I", n) + payload


class Conn:
    def __init__(self, path, timeout=5.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        self.closed = False        # the peer closed: EOF read
        self.write_failed = False  # the peer stopped reading; what it sent may still be queued for us

    def send(self, data):
        """Sends; returns False if the peer no longer reads."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            self.write_failed = True
            return False

    def start(self):
        """Preface and empty SETTINGS, as a client must begin."""
        return self.send(PREFACE + settings())

    def frames(self, until, timeout=5.0):
        """Reads frames (type, flags, stream, payload), acking SETTINGS and
        PING, until until(frame) is true, the peer closes, or timeout;
        returns every frame read."""
        got = []
        deadline = time.monotonic() + timeout
        while True:
            while len(self.buf) >= 9:
                n = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) < 9 + n:
                    break
                f = (self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF, self.buf[9:9 + n])
                self.buf = self.buf[9 + n:]
                got.append(f)
                if f[0] == SETTINGS and not f[1] & ACK and not self.write_failed:
                    self.send(settings(ack=True))
                if f[0] == PING and not f[1] & ACK and not self.write_failed:
                    self.send(frame(PING, ACK, 0, f[3]))
                if until(f):
                    return got
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                return got
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return got
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            if not data:
                self.closed = True
                return got
            self.buf += data

    def wait_closed(self, timeout=5.0):
        """Frames read until the peer closes; None if it did not close."""
        got = self.frames(lambda f: False, timeout)
        return got if self.closed else None

    def close(self):
        self.sock.close()


def goaway_code(frames):
    """The error code of the first GOAWAY among frames, or None."""
    for t, _, _, p in frames:
        if t == GOAWAY and len(p) >= 8:
            return int.from_bytes(p[4:8], "big")
    return None


def stream_outcome(frames, stream):
    """How the peer ended `stream`: 'data' if it sent a message on it,
    'trailers' (HEADERS with END_STREAM and no message), 'rst' (RST_STREAM)
    or 'goaway' (the connection was torn down); None if still open."""
    data = False
    for t, fl, s, _ in frames:
        if s == stream and t == DATA and _:
            data = True
        if s == stream and t == HEADERS and fl & END_STREAM:
            return "data" if data else "trailers"
        if s == stream and t == RST_STREAM:
            return "rst"
        if t == GOAWAY:
            return "goaway"
    return None
