"""kubelet's PodResources v1 service (reference/device-plugin.md section 2),
on its own socket (kubelet: /var/lib/kubelet/pod-resources/kubelet.sock).

Pods are plain data so a test can say which pod holds which device:

    pods = [{"name": "train-0", "namespace": "ml", "containers": [
               {"name": "main", "devices": [
                   {"resource_name": "nvidia.com/gpu", "device_ids": ["GPU-..."], "numa": [0]}]}]}]

GetAllocatableResources answers `allocatable` when given, otherwise the
allocatable devices of the Kubelet stand-in it is attached to (healthy
devices of connected plugins, one ContainerDevices per device, as kubelet
reports them).
"""
import os
import threading
from concurrent import futures

import grpc

from . import protos


class PodResourcesServer:
    def __init__(self, socket_path, pods=(), allocatable=None, kubelet=None):
        self.socket = os.path.abspath(socket_path)
        self.kubelet = kubelet
        self._lock = threading.Lock()
        self._pods = list(pods)
        self._allocatable = allocatable
        self.calls = {"List": 0, "GetAllocatableResources": 0, "Get": 0}
        _, _, self.pb, self.grpc_mod = protos.load()
        self._server = None

    def set_pods(self, pods):
        with self._lock:
            self._pods = list(pods)

    def set_allocatable(self, allocatable):
        with self._lock:
            self._allocatable = allocatable

    def start(self):
        os.makedirs(os.path.dirname(self.socket), exist_ok=True)
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        pb = self.pb
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="podresources"))
        handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
            "List": grpc.unary_unary_rpc_method_handler(
                self._list, request_deserializer=pb.ListPodResourcesRequest.FromString,
                response_serializer=pb.ListPodResourcesResponse.SerializeToString),
            "GetAllocatableResources": grpc.unary_unary_rpc_method_handler(
                self._allocatable_rpc, request_deserializer=pb.AllocatableResourcesRequest.FromString,
                response_serializer=pb.AllocatableResourcesResponse.SerializeToString),
            "Get": grpc.unary_unary_rpc_method_handler(
                self._get, request_deserializer=pb.GetPodResourcesRequest.FromString,
                response_serializer=pb.GetPodResourcesResponse.SerializeToString),
        })
        server.add_generic_rpc_handlers((handler,))
        if server.add_insecure_port("unix://" + self.socket) == 0:
            raise RuntimeError(f"cannot listen on {self.socket}")
        server.start()
        self._server = server
        return self

    def stop(self):
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ---- message building ---------------------------------------------------

    def _topology(self, numa):
        return self.pb.TopologyInfo(nodes=[self.pb.NUMANode(ID=n) for n in numa])

    def _container_devices(self, d):
        cd = self.pb.ContainerDevices(resource_name=d["resource_name"], device_ids=list(d["device_ids"]))
        if d.get("numa"):
            cd.topology.CopyFrom(self._topology(d["numa"]))
        return cd

    def _pod(self, p):
        pb = self.pb
        return pb.PodResources(name=p["name"], namespace=p.get("namespace", "default"), containers=[
            pb.ContainerResources(name=c["name"],
                                  devices=[self._container_devices(d) for d in c.get("devices", ())],
                                  cpu_ids=list(c.get("cpu_ids", ())))
            for c in p.get("containers", ())])

    # ---- handlers -------------------------------------------------------------

    def _list(self, req, context):
        with self._lock:
            self.calls["List"] += 1
            pods = list(self._pods)
        return self.pb.ListPodResourcesResponse(pod_resources=[self._pod(p) for p in pods])

    def _get(self, req, context):
        with self._lock:
            self.calls["Get"] += 1
            pods = list(self._pods)
        for p in pods:
            if p["name"] == req.pod_name and p.get("namespace", "default") == req.pod_namespace:
                return self.pb.GetPodResourcesResponse(pod_resources=self._pod(p))
        # kubelet answers a plain Go error here, hence UNKNOWN
        context.abort(grpc.StatusCode.UNKNOWN,
                      f"pod {req.pod_name} in namespace {req.pod_namespace} not found")
        return None

    def _allocatable_rpc(self, req, context):
        with self._lock:
            self.calls["GetAllocatableResources"] += 1
            explicit = self._allocatable
        if explicit is not None:
            devices = [self._container_devices(d) for d in explicit]
        else:
            devices = []
            if self.kubelet is not None:
                with self.kubelet.cond:
                    resources = list(self.kubelet.resources.values())
                for r in resources:
                    devs = r.devices
                    for i in sorted(r.allocatable):
                        devices.append(self._container_devices(
                            {"resource_name": r.name, "device_ids": [i], "numa": devs[i].numa}))
        return self.pb.AllocatableResourcesResponse(devices=devices)


def client(socket_path):
    """(channel, PodResourcesListerStub) for a PodResources socket."""
    _, _, _, grpc_mod = protos.load()
    ch = grpc.insecure_channel("unix://" + os.path.abspath(socket_path))
    return ch, grpc_mod.PodResourcesListerStub(ch)
