#!/usr/bin/python3
"""Hostile and broken clients on the device plugin's socket, while the
kubelet stand-in stays registered: malformed HTTP/2 (written byte by byte by
kubelet/h2raw.py), gRPC framing that lies, garbage protobuf, oversized
messages, unknown methods, absurd requests.  Each must get an error (a
GOAWAY with the RFC 9113 code, a stream reset, or a gRPC status), and after
every one the plugin must still serve kubelet: Allocate works, ListAndWatch
still delivers health changes, and no connection is leaked.
"""
import os
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

from kubelet import h2raw  # noqa: E402
from kubelet.h2raw import (CONTINUATION, DATA, END_HEADERS, END_STREAM, HEADERS, SETTINGS,  # noqa: E402
                           WINDOW_UPDATE, frame, grpc_headers, grpc_message, hpack_literal)
from kubelet.harness import GPU, PluginCase  # noqa: E402

ALLOCATE = "/v1beta1.DevicePlugin/Allocate"
PREFERRED = "/v1beta1.DevicePlugin/GetPreferredAllocation"
PROTOCOL_ERROR, FRAME_SIZE_ERROR, COMPRESSION_ERROR = 1, 6, 9

# Connection-level garbage: (name, bytes after connect, acceptable GOAWAY
# codes; None in the set = closing without a GOAWAY is acceptable too)
CONNECTION_CASES = [
    ("HTTP/1.1 request", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", {None, PROTOCOL_ERROR}),
    ("broken preface", h2raw.PREFACE[:-6] + b"XXXXXX" + h2raw.settings(), {None, PROTOCOL_ERROR}),
    ("SETTINGS length not a multiple of 6", h2raw.PREFACE + frame(SETTINGS, 0, 0, b"\0" * 5),
     {FRAME_SIZE_ERROR}),
    ("HEADERS on stream 0", h2raw.PREFACE + h2raw.settings() +
     frame(HEADERS, END_HEADERS, 0, hpack_literal(grpc_headers(ALLOCATE))), {PROTOCOL_ERROR}),
    ("undecodable HPACK", h2raw.PREFACE + h2raw.settings() +
     frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\x80\xff\xff\xff\xff\xff"), {COMPRESSION_ERROR}),
    ("DATA on an idle stream", h2raw.PREFACE + h2raw.settings() + frame(DATA, 0, 1, b"abc"), {PROTOCOL_ERROR}),
    ("frame larger than SETTINGS_MAX_FRAME_SIZE", h2raw.PREFACE + h2raw.settings() +
     frame(DATA, 0, 1, b"x" * 64, length=1 << 20), {FRAME_SIZE_ERROR}),
    ("WINDOW_UPDATE of 0", h2raw.PREFACE + h2raw.settings() + frame(WINDOW_UPDATE, 0, 0, b"\0\0\0\0"),
     {PROTOCOL_ERROR}),
    ("CONTINUATION without HEADERS", h2raw.PREFACE + h2raw.settings() + frame(CONTINUATION, END_HEADERS, 1, b""),
     {PROTOCOL_ERROR}),
]


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class WireTest(PluginCase):
    def setUp(self):
        super().setUp()
        self.info_doc = self.info("dgx-h100")
        self.u = [g["uuid"] for g in self.info_doc["gpus"]]
        self.k = self.start_kubelet()
        self.p = self.start_plugin("dgx-h100")
        self.res = self.registered()
        self.sock = os.path.join(self.dir, "nvidia-gpu.sock")
        self.raw_channel = grpc.insecure_channel("unix://" + self.sock, options=[
            ("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)])
        time.sleep(0.2)
        self.fds0 = open_fds(self.p.pid)

    def tearDown(self):
        self.raw_channel.close()
        super().tearDown()

    def still_serving(self, why):
        self.assertTrue(self.p.alive(), f"plugin died after {why}")
        self.assertTrue(self.k.resource(GPU).connected, f"kubelet's ListAndWatch broke after {why}")
        resp = self.k.allocate(GPU, [[self.u[0]]])
        self.assertEqual(resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"], self.u[0], why)

    def raw_call(self, method, payload):
        call = self.raw_channel.unary_unary(method)  # bytes in, bytes out
        return call(payload, timeout=5)

    def test_malformed_http2_closes_only_that_connection(self):
        for name, data, codes in CONNECTION_CASES:
            with self.subTest(case=name):
                c = h2raw.Conn(self.sock)
                try:
                    c.send(data)
                    got = c.wait_closed(timeout=5)
                    self.assertIsNotNone(got, f"{name}: connection left open")
                    code = h2raw.goaway_code(got)
                    self.assertIn(code, codes, f"{name}: GOAWAY {h2raw.ERROR_CODES.get(code, code)}")
                finally:
                    c.close()
                self.still_serving(name)

    def test_truncated_and_abandoned_connections(self):
        conns = []
        for cut in (3, len(h2raw.PREFACE), len(h2raw.PREFACE) + 5):
            c = h2raw.Conn(self.sock)
            c.send((h2raw.PREFACE + h2raw.settings())[:cut])
            c.sock.shutdown(socket.SHUT_WR)
            conns.append(c)
        # a call half sent: HEADERS, then part of a message, then silence
        c = h2raw.Conn(self.sock)
        c.start()
        c.send(frame(HEADERS, END_HEADERS, 1, hpack_literal(grpc_headers(ALLOCATE))) +
               frame(DATA, 0, 1, grpc_message(b"\x0a\x02", length=40)))
        conns.append(c)
        self.still_serving("half-sent requests")
        for c in conns:
            c.close()
        self.still_serving("abandoned connections")

    def test_grpc_framing_that_lies(self):
        cases = [
            ("length prefix longer than the data", grpc_message(b"\x0a\x02", length=100), True),
            ("compressed flag without grpc-encoding", grpc_message(b"\x0a\x00", compressed=True), True),
            ("5-byte prefix cut short", b"\x00\x00\x00", True),
            ("declares 64 MiB, sends 64 KiB and waits", grpc_message(b"x" * 65536, length=64 << 20), False),
        ]
        for name, body, end in cases:
            with self.subTest(case=name):
                c = h2raw.Conn(self.sock)
                try:
                    c.start()
                    c.send(frame(HEADERS, END_HEADERS, 1, hpack_literal(grpc_headers(ALLOCATE))))
                    # DATA in frames within the default 16 KiB frame size
                    for i in range(0, len(body), 16384):
                        chunk = body[i:i + 16384]
                        last = i + 16384 >= len(body)
                        c.send(frame(DATA, END_STREAM if (end and last) else 0, 1, chunk))
                    got = c.frames(lambda f: h2raw.stream_outcome([f], 1) is not None, timeout=5)
                    outcome = h2raw.stream_outcome(got, 1)
                    self.assertIn(outcome, ("trailers", "rst", "goaway"),
                                  f"{name}: stream 1 ended with {outcome!r} (None = no answer in 5 s)")
                finally:
                    c.close()
                self.still_serving(name)

    def test_garbage_protobuf_gets_an_error(self):
        garbage = [
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",   # field number 0 / varint overflow
            b"\x0a\xff",                                       # length-delimited, length runs off the end
            b"\x0a\x05ab",                                     # nested message cut short
            b"\x0b",                                           # deprecated group start
        ]
        for payload in garbage:
            for method in (ALLOCATE, PREFERRED):
                with self.subTest(method=method, payload=payload):
                    with self.assertRaises(grpc.RpcError) as cm:
                        self.raw_call(method, payload)
                    self.assertIn(cm.exception.code(), (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.INTERNAL),
                                  cm.exception.details())
        self.still_serving("garbage protobuf")

    def test_oversized_message_resource_exhausted(self):
        with self.assertRaises(grpc.RpcError) as cm:
            self.raw_call(ALLOCATE, b"\x0a" + b"\x80\x80\x80\x03" + b"x" * (5 << 20))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, cm.exception.details())
        self.still_serving("a 5 MiB message")

    def test_unknown_method_unimplemented(self):
        for method in ("/v1beta1.DevicePlugin/Frobnicate", "/v1beta1.Registration/Register", "/x"):
            with self.subTest(method=method):
                with self.assertRaises(grpc.RpcError) as cm:
                    self.raw_call(method, b"")
                self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.still_serving("unknown methods")

    def test_absurd_but_well_formed_requests(self):
        k = self.k
        # many unknown IDs: rejected, with a bounded message
        many = [f"GPU-{i:059d}" for i in range(20000)]
        with self.assertRaises(grpc.RpcError) as cm:
            k.allocate(GPU, [many])
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("GPU-", cm.exception.details())
        self.assertLess(len(cm.exception.details()), 16384)
        # preferred allocation with sizes out of range and strangers in the list
        avail = self.u + ["GPU-stranger"]
        for size in (-1, 0, 9, 1 << 30):
            with self.subTest(size=size):
                try:
                    got = k.preferred(GPU, avail, size)
                except grpc.RpcError as e:
                    self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
                    continue
                self.assertLessEqual(len(got), max(size, 0))
                self.assertTrue(set(got) <= set(self.u), got)
        got = k.preferred(GPU, avail, 3, must_include=[self.u[7]])
        self.assertIn(self.u[7], got)
        self.assertNotIn("GPU-stranger", got)
        # an empty request: one response per container, none here
        self.assertEqual(len(k.allocate(GPU, []).container_responses), 0)
        self.still_serving("absurd requests")

    def test_many_connections_then_health_still_flows(self):
        conns = [h2raw.Conn(self.sock) for _ in range(40)]
        for c in conns:
            c.start()
        self.still_serving("40 idle connections")
        for c in conns:
            c.close()
        # ListAndWatch to kubelet is untouched by all of the above
        t = self.inject("dgx-h100", 3, "xid", "79")
        up = self.k.wait_update(GPU, lambda x: self.u[3] in x.unhealthy, 10, since=t)
        self.assertIsNotNone(up, "health no longer reaches kubelet")
        # closed connections are reaped: no fd leak
        deadline = time.monotonic() + 5
        while open_fds(self.p.pid) > self.fds0 + 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertLessEqual(open_fds(self.p.pid), self.fds0 + 2, "connections leaked")


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
