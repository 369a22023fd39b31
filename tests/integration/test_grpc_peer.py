#!/usr/bin/python3
"""Our gRPC stack against a real, independent one: Python grpcio.

grpcio client -> our server (tests/tools/grpc_echo serve) over unix:PATH,
with the device-plugin messages: unary, server streaming, error status with
an encoded message, deadlines, unknown methods, many concurrent calls on one
and on many channels, SIGTERM shutdown.  And our client (grpc_echo register,
which is grpc_unary) -> a grpcio Registration server: the request arrives
intact, error statuses and messages come back decoded, deadlines hold.

The Python stubs are generated from proto/ at test time with grpc_tools.
"""
import concurrent.futures
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc
from grpc_tools import protoc

SRC = os.environ.get("GPUOP_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("GPUOP_BUILD_DIR", os.path.join(SRC, "build"))
ECHO = os.path.join(BUILD, "tests", "tools", "grpc_echo")

STUBS = tempfile.mkdtemp(prefix="gpuop-grpc-stubs-")
rc = protoc.main(["protoc", "-I" + os.path.join(SRC, "proto"), "--python_out=" + STUBS,
                  "--grpc_python_out=" + STUBS, "deviceplugin/v1beta1/api.proto"])
if rc != 0:
    sys.exit("grpc_tools.protoc failed on proto/deviceplugin/v1beta1/api.proto")
sys.path.insert(0, STUBS)
from deviceplugin.v1beta1 import api_pb2 as pb  # noqa: E402
from deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc  # noqa: E402

GPU0 = "GPU-0b7a2c5e-1111-2222-3333-444455556666"
GPU1 = "GPU-9f3d8e21-aaaa-bbbb-cccc-ddddeeeeffff"


class OurServer(unittest.TestCase):
    """grpcio as the kubelet, dialing our server."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpuop-grpc-")
        self.sock = os.path.join(self.dir, "nvidia-gpu.sock")
        self.proc = subprocess.Popen([ECHO, "serve", self.sock], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        self.assertEqual(line.strip(), "listening " + self.sock, self.proc.stderr.read() if not line else line)
        self.channel = grpc.insecure_channel("unix:" + self.sock)
        self.stub = pb_grpc.DevicePluginStub(self.channel)

    def tearDown(self):
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=10)
        self.proc.stdout.close()
        self.proc.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_unary_options(self):
        o = self.stub.GetDevicePluginOptions(pb.Empty(), timeout=5)
        self.assertTrue(o.get_preferred_allocation_available)
        self.assertFalse(o.pre_start_required)

    def test_allocate_and_preferred(self):
        r = self.stub.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[GPU0, GPU1]),
            pb.ContainerAllocateRequest(devices_ids=[GPU1])]), timeout=5)
        self.assertEqual(len(r.container_responses), 2)
        self.assertEqual(r.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"], GPU0 + "," + GPU1)
        self.assertEqual(r.container_responses[1].envs["NVIDIA_VISIBLE_DEVICES"], GPU1)
        p = self.stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=[GPU1, GPU0], allocation_size=1)]),
            timeout=5)
        self.assertEqual(list(p.container_responses[0].deviceIDs), [GPU1])

    def test_error_status_and_message(self):
        with self.assertRaises(grpc.RpcError) as cm:
            self.stub.Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=["my gpu 50%", GPU0])]), timeout=5)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(cm.exception.details(),
                         'unknown device IDs: "my gpu 50%" \u2014 100% of requests must name known GPUs')

    def test_unknown_method(self):
        call = self.channel.unary_unary("/v1beta1.DevicePlugin/NoSuchMethod")
        with self.assertRaises(grpc.RpcError) as cm:
            call(b"", timeout=5)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.assertIn("/v1beta1.DevicePlugin/NoSuchMethod", cm.exception.details())

    def test_deadline(self):
        t0 = time.monotonic()
        with self.assertRaises(grpc.RpcError) as cm:
            self.stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=[GPU0]), timeout=0.3)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertLess(time.monotonic() - t0, 1.5)
        # The server stays healthy after the abandoned call.
        self.assertTrue(self.stub.GetDevicePluginOptions(pb.Empty(), timeout=5).get_preferred_allocation_available)

    def test_list_and_watch_stream(self):
        stream = self.stub.ListAndWatch(pb.Empty(), timeout=10)
        first = next(stream)
        self.assertEqual([(d.ID, d.health, [n.ID for n in d.topology.nodes]) for d in first.devices],
                         [(GPU0, "Healthy", [0]), (GPU1, "Healthy", [1])])
        second = next(stream)  # the full list again, after a change
        self.assertEqual([(d.ID, d.health) for d in second.devices],
                         [(GPU0, "Healthy"), (GPU1, "Unhealthy")])
        stream.cancel()
        # Cancelling one stream leaves the server serving.
        self.assertEqual(len(next(self.stub.ListAndWatch(pb.Empty(), timeout=5)).devices), 2)

    def test_many_concurrent_calls(self):
        futures = [self.stub.Allocate.future(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[GPU0 if i % 2 else GPU1])]), timeout=10)
            for i in range(200)]
        for i, f in enumerate(futures):
            self.assertEqual(f.result().container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"],
                             GPU0 if i % 2 else GPU1)
        # And on many channels (connections) at once.
        channels = [grpc.insecure_channel("unix:" + self.sock) for _ in range(20)]
        try:
            fs = [pb_grpc.DevicePluginStub(c).GetDevicePluginOptions.future(pb.Empty(), timeout=10)
                  for c in channels for _ in range(5)]
            self.assertTrue(all(f.result().get_preferred_allocation_available for f in fs))
        finally:
            for c in channels:
                c.close()

    def test_sigterm_ends_streams_and_removes_socket(self):
        stream = self.stub.ListAndWatch(pb.Empty(), timeout=10)
        next(stream)
        self.proc.send_signal(signal.SIGTERM)
        with self.assertRaises(grpc.RpcError) as cm:
            for _ in stream:
                pass
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(self.proc.wait(timeout=10), 0)
        self.assertFalse(os.path.exists(self.sock))


class Registration(pb_grpc.RegistrationServicer):
    def __init__(self):
        self.requests = []
        self.mode = "ok"
        self.release = threading.Event()  # ends a "slow" Register

    def Register(self, request, context):
        self.requests.append(request)
        if self.mode == "reject":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          "resource name \u00abnvidia.com/gpu\u00bb: 100% wrong\nsecond line")
        if self.mode == "slow":
            # Answers only when the test is over: a client that waits for
            # the answer instead of its deadline shows as one that hangs.
            self.release.wait(60)
        return pb.Empty()


class OurClient(unittest.TestCase):
    """Our client (grpc_unary) registering with a grpcio kubelet."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpuop-grpc-")
        self.sock = os.path.join(self.dir, "kubelet.sock")
        self.servicer = Registration()
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RegistrationServicer_to_server(self.servicer, self.server)
        self.server.add_insecure_port("unix:" + self.sock)
        self.server.start()

    def tearDown(self):
        self.servicer.release.set()
        self.server.stop(0)
        shutil.rmtree(self.dir, ignore_errors=True)

    def register(self, *extra):
        r = subprocess.run([ECHO, "register", self.sock, "nvidia.com/gpu", "nvidia-gpu.sock", *extra],
                           capture_output=True, text=True, timeout=30)
        return r

    def test_register_ok(self):
        r = self.register()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "status=0 message=")
        self.assertEqual(len(self.servicer.requests), 1)
        req = self.servicer.requests[0]
        self.assertEqual(req.version, "v1beta1")
        self.assertEqual(req.resource_name, "nvidia.com/gpu")
        self.assertEqual(req.endpoint, "nvidia-gpu.sock")
        self.assertTrue(req.options.get_preferred_allocation_available)

    def test_register_rejected_message_decoded(self):
        self.servicer.mode = "reject"
        r = self.register()
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, "status=3 message=resource name \u00abnvidia.com/gpu\u00bb: 100% wrong\n"
                         "second line\n")
        self.assertIn("Register on kubelet.sock: INVALID_ARGUMENT: resource name", r.stderr)

    def test_register_deadline(self):
        self.servicer.mode = "slow"
        t0 = time.monotonic()
        r = self.register("300")
        self.assertEqual(r.returncode, 1)
        self.assertTrue(r.stdout.startswith("status=4 "), r.stdout)
        # The 300 ms deadline, loosely: starting the tool (under ASan, on a
        # loaded machine) counts here too, and the server never answers.
        self.assertLess(time.monotonic() - t0, 10)

    def test_register_no_kubelet(self):
        self.server.stop(0).wait()
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        r = self.register()
        self.assertEqual(r.returncode, 1)
        self.assertTrue(r.stdout.startswith("status=14 "), r.stdout)
        self.assertIn("Register on kubelet.sock: UNAVAILABLE: connect:", r.stderr)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    shutil.rmtree(STUBS, ignore_errors=True)
    failed = len(result.failures) + len(result.errors)
    print("%d passed, %d failed" % (result.testsRun - failed, failed))
    sys.exit(1 if failed else 0)
