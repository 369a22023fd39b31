"""Kubelet stand-in for gpuop's device-plugin tests and benchmarks.

    from kubelet import Kubelet, PodResourcesServer
    with Kubelet(plugin_dir) as k:
        res = k.wait_registered("nvidia.com/gpu", timeout=10)
        k.allocate("nvidia.com/gpu", [[some_id]])

The trivial grpcio plugin used as a peer is kubelet.fakeplugin.FakePlugin.
Python stubs are generated at run time from proto/ (kubelet.protos).
A person can run it too: `/usr/bin/python3 tests/integration/kubelet --help`.
"""
from .standin import (CHECKPOINT, HEALTHY, KUBELET_SOCKET, SUPPORTED_VERSIONS, Device, Kubelet,  # noqa: F401
                      Resource, Update, is_extended_resource_name, is_qualified_name, register)
from .podresources import PodResourcesServer, client as podresources_client  # noqa: F401
from . import protos  # noqa: F401
