"""The kubelet side of the device-plugin API, as kubelet's device manager
behaves (reference/device-plugin.md section 1):

* serves /v1beta1.Registration/Register on <dir>/kubelet.sock;
* Register checks the version is one kubelet supports and the resource name
  is an extended resource name, then dials <dir>/<endpoint> and calls
  GetDevicePluginOptions BEFORE answering; any failure is a gRPC error to
  the plugin and nothing is registered;
* after answering it opens ListAndWatch and rebuilds the resource's
  healthy/unhealthy sets from every message (each carries the full list:
  an omitted device is gone; any health other than "Healthy" is unhealthy);
  a broken stream makes the resource's devices unallocatable;
* a second registration of a resource replaces the first endpoint;
* restart() is a kubelet restart: stop serving (connections drop), run
  CleanupPluginDirectory (delete every non-directory entry except
  kubelet_internal_checkpoint), then listen on a fresh kubelet.sock.

Every registration and device-list update is time-stamped with
time.monotonic() so tests and benchmarks can measure latencies.
"""
import json
import os
import re
import threading
import time
from concurrent import futures

import grpc

from . import protos

SUPPORTED_VERSIONS = ("v1beta1",)
HEALTHY = "Healthy"
CHECKPOINT = "kubelet_internal_checkpoint"
KUBELET_SOCKET = "kubelet.sock"

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def is_qualified_name(value):
    """Kubernetes' IsQualifiedName: [prefix/]name, prefix a DNS-1123
    subdomain (<= 253), name <= 63 alphanumerics, '-', '_', '.'."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix):
            return False
    else:
        return False
    return 0 < len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


def is_extended_resource_name(name):
    """Kubernetes' IsExtendedResourceName: domain-prefixed, not in the
    kubernetes.io namespace, not itself a quota name, and a qualified name
    once prefixed with "requests." (how quota refers to it)."""
    if "/" not in name or "kubernetes.io/" in name:
        return False
    if name.startswith("requests."):
        return False
    return is_qualified_name("requests." + name)


class Device:
    __slots__ = ("id", "health", "numa")

    def __init__(self, pb):
        self.id = pb.ID
        self.health = pb.health
        self.numa = tuple(n.ID for n in pb.topology.nodes) if pb.HasField("topology") else ()

    @property
    def healthy(self):
        return self.health == HEALTHY

    def __repr__(self):
        return f"Device({self.id!r}, {self.health!r}, numa={self.numa})"


class Update:
    """One ListAndWatch message as kubelet applied it."""
    __slots__ = ("t", "devices", "generation")

    def __init__(self, t, devices, generation):
        self.t = t
        self.devices = devices      # {id: Device}
        self.generation = generation

    @property
    def healthy(self):
        return {i for i, d in self.devices.items() if d.healthy}

    @property
    def unhealthy(self):
        return {i for i, d in self.devices.items() if not d.healthy}


class Resource:
    """A registered resource (kubelet's endpoint for it)."""

    def __init__(self, name, endpoint, version, options, generation, registered_at, channel):
        self.name = name
        self.endpoint = endpoint
        self.version = version
        self.options = options          # DevicePluginOptions from the plugin
        self.generation = generation    # registration sequence number, kubelet-wide
        self.registered_at = registered_at
        self.channel = channel
        self.updates = []               # [Update], oldest first
        self.connected = True           # ListAndWatch open
        self.disconnected_at = None
        self.stream = None
        self.stream_error = None

    @property
    def devices(self):
        return self.updates[-1].devices if self.updates else {}

    @property
    def healthy(self):
        return self.updates[-1].healthy if self.updates else set()

    @property
    def unhealthy(self):
        return self.updates[-1].unhealthy if self.updates else set()

    @property
    def allocatable(self):
        """What kubelet would let the scheduler use: healthy devices of a
        connected plugin (a broken stream makes them all unhealthy)."""
        return self.healthy if self.connected else set()


class RegistrationError(Exception):
    pass


class Kubelet:
    """The kubelet stand-in.  Use as a context manager or call start()/stop().

    dial_timeout: how long Register waits for the plugin's socket to answer
    (kubelet: a blocking 10 s dial).
    """

    def __init__(self, plugin_dir, dial_timeout=10.0, write_checkpoint=True):
        self.dir = os.path.abspath(plugin_dir)
        self.dial_timeout = dial_timeout
        self.write_checkpoint = write_checkpoint
        self.pb, self.grpc_mod, _, _ = protos.load()
        self.cond = threading.Condition()
        self.resources = {}          # name -> Resource (current endpoint)
        self.registrations = []      # accepted: (t, name, endpoint, generation)
        self.rejections = []         # (t, name, endpoint, reason)
        self.started_at = None       # monotonic time kubelet.sock was last created
        self.restarts = 0
        self._server = None
        self._generation = 0
        self._retired = []           # replaced/closed resources, streams to cancel

    # ---- lifecycle -------------------------------------------------------

    @property
    def socket(self):
        return os.path.join(self.dir, KUBELET_SOCKET)

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        self.cleanup_plugin_directory()
        if self.write_checkpoint:
            self._write_checkpoint()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="kubelet"))
        handler = grpc.method_handlers_generic_handler("v1beta1.Registration", {
            "Register": grpc.unary_unary_rpc_method_handler(
                self._register,
                request_deserializer=self.pb.RegisterRequest.FromString,
                response_serializer=self.pb.Empty.SerializeToString),
        })
        server.add_generic_rpc_handlers((handler,))
        if server.add_insecure_port("unix://" + self.socket) == 0:
            raise RuntimeError(f"cannot listen on {self.socket}")
        server.start()
        with self.cond:
            self._server = server
            self.started_at = time.monotonic()
            self.cond.notify_all()
        return self

    def stop(self):
        """Stop as a dying kubelet does: the listener and every connection
        to plugins go away.  Files are left for the next start to clean."""
        with self.cond:
            server, self._server = self._server, None
            resources = list(self.resources.values()) + self._retired
            self.resources = {}
            self._retired = []
        if server is not None:
            server.stop(grace=None).wait(5)
        for r in resources:
            self._close_resource(r)
        with self.cond:
            self.cond.notify_all()

    def restart(self):
        """A kubelet restart; returns the monotonic time the new kubelet.sock
        was listening."""
        self.stop()
        self.start()
        self.restarts += 1
        return self.started_at

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def cleanup_plugin_directory(self):
        """kubelet's CleanupPluginDirectory: every non-directory entry except
        the checkpoint goes, sockets of running plugins included."""
        for name in os.listdir(self.dir):
            if name == CHECKPOINT:
                continue
            path = os.path.join(self.dir, name)
            if os.path.isdir(path) and not os.path.islink(path):
                continue
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def _write_checkpoint(self):
        # The shape kubelet writes; plugins must leave it alone.
        path = os.path.join(self.dir, CHECKPOINT)
        if not os.path.exists(path):
            with open(path, "w") as f:
                json.dump({"Data": {"PodDeviceEntries": None, "RegisteredDevices": {}}, "Checksum": 0}, f)

    # ---- Registration service ---------------------------------------------

    def _reject(self, context, req, reason):
        with self.cond:
            self.rejections.append((time.monotonic(), req.resource_name, req.endpoint, reason))
            self.cond.notify_all()
        # kubelet returns a plain Go error: the plugin sees UNKNOWN + text
        context.abort(grpc.StatusCode.UNKNOWN, reason)

    def _register(self, req, context):
        if req.version not in SUPPORTED_VERSIONS:
            self._reject(context, req, f"Requested device plugin version {req.version!r} is not supported "
                                       f"(supported: {', '.join(SUPPORTED_VERSIONS)})")
        if not is_extended_resource_name(req.resource_name):
            self._reject(context, req, f"invalid name of device plugin socket: {req.resource_name!r} "
                                       "is not an extended resource name")
        path = os.path.normpath(os.path.join(self.dir, req.endpoint))
        channel = grpc.insecure_channel("unix://" + path, options=[("grpc.default_authority", "localhost")])
        try:
            grpc.channel_ready_future(channel).result(timeout=self.dial_timeout)
            stub = self.grpc_mod.DevicePluginStub(channel)
            options = stub.GetDevicePluginOptions(self.pb.Empty(), timeout=self.dial_timeout)
        except (grpc.FutureTimeoutError, grpc.RpcError) as e:
            channel.close()
            detail = e.details() if isinstance(e, grpc.RpcError) else f"dial timed out after {self.dial_timeout} s"
            self._reject(context, req, f"failed to dial device plugin {path}: {detail}")
            return None
        now = time.monotonic()
        with self.cond:
            self._generation += 1
            res = Resource(req.resource_name, req.endpoint, req.version, options, self._generation, now, channel)
            old = self.resources.get(req.resource_name)
            if old is not None:
                self._retired.append(old)
            self.resources[req.resource_name] = res
            self.registrations.append((now, req.resource_name, req.endpoint, res.generation))
            self.cond.notify_all()
        if old is not None:
            self._close_resource(old)
        threading.Thread(target=self._list_and_watch, args=(res,), daemon=True,
                         name="lw-" + req.resource_name).start()
        return self.pb.Empty()

    def _list_and_watch(self, res):
        stub = self.grpc_mod.DevicePluginStub(res.channel)
        try:
            stream = stub.ListAndWatch(self.pb.Empty())
            res.stream = stream
            for msg in stream:
                t = time.monotonic()
                devs = {}
                for d in msg.devices:
                    devs[d.ID] = Device(d)
                with self.cond:
                    res.updates.append(Update(t, devs, res.generation))
                    self.cond.notify_all()
        except grpc.RpcError as e:
            res.stream_error = e
        except ValueError:
            pass  # channel closed under us by stop()
        with self.cond:
            res.connected = False
            res.disconnected_at = time.monotonic()
            self.cond.notify_all()

    def _close_resource(self, res):
        if res.stream is not None:
            res.stream.cancel()
        res.channel.close()

    # ---- waiting ------------------------------------------------------------

    def wait(self, pred, timeout):
        """Waits until pred() (called under the lock) is truthy; returns its
        value, or None after timeout seconds."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                v = pred()
                if v:
                    return v
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def wait_registered(self, name, timeout=10.0, since=None):
        """The resource once registered (after monotonic time `since`, if
        given) and its first device list has arrived; None on timeout."""
        def ready():
            r = self.resources.get(name)
            if r is None or (since is not None and r.registered_at < since) or not r.updates:
                return None
            return r
        return self.wait(ready, timeout)

    def wait_update(self, name, pred, timeout=10.0, since=None):
        """The first Update of the current registration of `name` received
        after `since` for which pred(update) is true; None on timeout."""
        def find():
            r = self.resources.get(name)
            if r is None:
                return None
            for u in r.updates:
                if (since is None or u.t >= since) and pred(u):
                    return u
            return None
        return self.wait(find, timeout)

    def resource(self, name):
        with self.cond:
            r = self.resources.get(name)
        if r is None:
            raise KeyError(f"resource {name} is not registered")
        return r

    # ---- calls kubelet makes on a registered plugin -------------------------

    def _stub(self, name):
        return self.grpc_mod.DevicePluginStub(self.resource(name).channel)

    def allocate(self, name, container_requests, timeout=5.0):
        """container_requests: [[device id, ...], ...]; returns the
        AllocateResponse (raises grpc.RpcError on a gRPC error)."""
        req = self.pb.AllocateRequest(container_requests=[
            self.pb.ContainerAllocateRequest(devices_ids=list(ids)) for ids in container_requests])
        return self._stub(name).Allocate(req, timeout=timeout)

    def preferred(self, name, available, size, must_include=(), timeout=5.0):
        """One container's GetPreferredAllocation; returns the list of IDs."""
        req = self.pb.PreferredAllocationRequest(container_requests=[
            self.pb.ContainerPreferredAllocationRequest(available_deviceIDs=list(available),
                                                        must_include_deviceIDs=list(must_include),
                                                        allocation_size=size)])
        resp = self._stub(name).GetPreferredAllocation(req, timeout=timeout)
        return list(resp.container_responses[0].deviceIDs)

    def prestart(self, name, ids, timeout=30.0):
        req = self.pb.PreStartContainerRequest(devices_ids=list(ids))
        return self._stub(name).PreStartContainer(req, timeout=timeout)

    def options(self, name, timeout=5.0):
        return self._stub(name).GetDevicePluginOptions(self.pb.Empty(), timeout=timeout)


def register(plugin_dir, resource_name, endpoint, version="v1beta1", preferred=True, timeout=5.0):
    """Call Register on <plugin_dir>/kubelet.sock as a plugin would (used
    to exercise the stand-in's checks).  Raises grpc.RpcError on rejection."""
    pb, grpc_mod, _, _ = protos.load()
    with grpc.insecure_channel("unix://" + os.path.join(os.path.abspath(plugin_dir), KUBELET_SOCKET)) as ch:
        stub = grpc_mod.RegistrationStub(ch)
        req = pb.RegisterRequest(version=version, endpoint=endpoint, resource_name=resource_name,
                                 options=pb.DevicePluginOptions(get_preferred_allocation_available=preferred))
        return stub.Register(req, timeout=timeout)
