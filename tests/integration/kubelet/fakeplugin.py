"""A trivial device plugin written with Python grpcio: the peer the kubelet
stand-in is tested against on its own, and the baseline bench/deviceplugin.py
times gpuop's plugin against.  It does what a minimal plugin must: serve
first, then register; send the full list on every change; Allocate known
healthy IDs; prefer must_include then the first available.

CLI (for the bench, in its own process so it does not share a GIL):
    python3 -m kubelet.fakeplugin --dir DIR [--devices 8] [--resource example.com/gpu]
"""
import argparse
import os
import signal
import threading
import time
from concurrent import futures

import grpc

from . import protos
from .standin import HEALTHY, KUBELET_SOCKET


class FakePlugin:
    def __init__(self, plugin_dir, resource="example.com/gpu", endpoint="fake-gpu.sock",
                 devices=None, preferred=True, version="v1beta1"):
        self.dir = os.path.abspath(plugin_dir)
        self.resource = resource
        self.endpoint = endpoint
        self.version = version
        self.preferred_available = preferred
        self.pb, self.grpc_mod, _, _ = protos.load()
        if devices is None:
            devices = [(f"FAKE-{i}", HEALTHY, i // 4) for i in range(8)]
        self._lock = threading.Condition()
        self._devices = {d[0]: [d[1], d[2]] for d in devices}
        self._gen = 0
        self._server = None
        self._stopping = False
        self.option_calls = 0

    @property
    def socket(self):
        return os.path.join(self.dir, self.endpoint)

    def set_health(self, dev_id, health):
        with self._lock:
            self._devices[dev_id][0] = health
            self._gen += 1
            self._lock.notify_all()

    def _list(self):
        pb = self.pb
        out = []
        for i, (h, numa) in self._devices.items():
            d = pb.Device(ID=i, health=h)
            if numa is not None:
                d.topology.nodes.add(ID=numa)
            out.append(d)
        return pb.ListAndWatchResponse(devices=out)

    # ---- DevicePlugin service ---------------------------------------------------

    def GetDevicePluginOptions(self, req, context):
        self.option_calls += 1
        return self.pb.DevicePluginOptions(get_preferred_allocation_available=self.preferred_available)

    def ListAndWatch(self, req, context):
        with self._lock:
            gen = self._gen
            msg = self._list()
        yield msg
        while context.is_active() and not self._stopping:
            with self._lock:
                self._lock.wait_for(lambda: self._gen != gen or self._stopping, timeout=0.5)
                if self._gen == gen:
                    continue
                gen = self._gen
                msg = self._list()
            yield msg

    def Allocate(self, req, context):
        pb = self.pb
        resp = pb.AllocateResponse()
        with self._lock:
            for cr in req.container_requests:
                bad = [i for i in cr.devices_ids if self._devices.get(i, [None])[0] != HEALTHY]
                if bad:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unknown or unhealthy devices: " + ",".join(bad))
                c = resp.container_responses.add()
                c.envs["FAKE_VISIBLE_DEVICES"] = ",".join(cr.devices_ids)
                for i in cr.devices_ids:
                    c.cdi_devices.add(name="example.com/gpu=" + i)
        return resp

    def GetPreferredAllocation(self, req, context):
        resp = self.pb.PreferredAllocationResponse()
        for cr in req.container_requests:
            ids = list(cr.must_include_deviceIDs)
            for i in cr.available_deviceIDs:
                if len(ids) >= cr.allocation_size:
                    break
                if i not in ids:
                    ids.append(i)
            resp.container_responses.add(deviceIDs=ids)
        return resp

    def PreStartContainer(self, req, context):
        return self.pb.PreStartContainerResponse()

    # ---- lifecycle --------------------------------------------------------------

    def serve(self):
        pb = self.pb
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="fakeplugin"))
        h = grpc.method_handlers_generic_handler("v1beta1.DevicePlugin", {
            "GetDevicePluginOptions": grpc.unary_unary_rpc_method_handler(
                self.GetDevicePluginOptions, pb.Empty.FromString, pb.DevicePluginOptions.SerializeToString),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                self.ListAndWatch, pb.Empty.FromString, pb.ListAndWatchResponse.SerializeToString),
            "Allocate": grpc.unary_unary_rpc_method_handler(
                self.Allocate, pb.AllocateRequest.FromString, pb.AllocateResponse.SerializeToString),
            "GetPreferredAllocation": grpc.unary_unary_rpc_method_handler(
                self.GetPreferredAllocation, pb.PreferredAllocationRequest.FromString,
                pb.PreferredAllocationResponse.SerializeToString),
            "PreStartContainer": grpc.unary_unary_rpc_method_handler(
                self.PreStartContainer, pb.PreStartContainerRequest.FromString,
                pb.PreStartContainerResponse.SerializeToString),
        })
        server.add_generic_rpc_handlers((h,))
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        if server.add_insecure_port("unix://" + self.socket) == 0:
            raise RuntimeError(f"cannot listen on {self.socket}")
        server.start()
        self._server = server
        return self

    def register(self, timeout=5.0):
        pb = self.pb
        with grpc.insecure_channel("unix://" + os.path.join(self.dir, KUBELET_SOCKET)) as ch:
            self.grpc_mod.RegistrationStub(ch).Register(pb.RegisterRequest(
                version=self.version, endpoint=self.endpoint, resource_name=self.resource,
                options=pb.DevicePluginOptions(get_preferred_allocation_available=self.preferred_available)),
                timeout=timeout)

    def stop(self):
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None
        try:
            os.unlink(self.socket)
        except FileNotFoundError:
            pass


def main():
    ap = argparse.ArgumentParser(description="a trivial grpcio device plugin (test and bench peer)")
    ap.add_argument("--dir", required=True, help="plugin directory holding kubelet.sock")
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--resource", default="example.com/gpu")
    ap.add_argument("--no-register", action="store_true", help="serve only")
    a = ap.parse_args()
    p = FakePlugin(a.dir, resource=a.resource,
                   devices=[(f"FAKE-{i}", HEALTHY, i * 2 // max(a.devices, 1)) for i in range(a.devices)])
    if not a.no_register:
        # kubelet's start wipes the directory, our socket included: serve
        # only once kubelet.sock is there, then register
        deadline = time.monotonic() + 30
        kubelet_sock = os.path.join(p.dir, KUBELET_SOCKET)
        while not os.path.exists(kubelet_sock):
            if time.monotonic() > deadline:
                raise SystemExit(f"no {kubelet_sock} after 30 s")
            time.sleep(0.02)
    p.serve()
    if not a.no_register:
        while True:
            try:
                p.register()
                break
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    print("serving", p.socket, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: done.set())
    signal.signal(signal.SIGINT, lambda *a: done.set())
    done.wait()
    p.stop()


if __name__ == "__main__":
    main()
