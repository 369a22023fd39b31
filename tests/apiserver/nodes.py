"""Realistic Node objects for the Kubernetes API server stand-in.

The operator's memory and resync targets are measured against thousands of
nodes, so the nodes must weigh what real ones weigh: a GPU node of a managed
cluster is 8-14 KB of JSON, most of it labels written by node-feature-discovery
and GPU Feature Discovery, the image list the kubelet reports, and annotations
written by the CSI and volume controllers.  These builders produce that shape
(v1 Node as kubelet v1.31 and GFD report it) deterministically from an index,
so two runs and two processes build byte-identical nodes.
"""
import hashlib
import uuid

KUBELET_VERSION = "v1.31.4"
CONTAINERD_VERSION = "containerd://1.7.24"
OS_IMAGE = "Ubuntu 22.04.5 LTS"
KERNEL_VERSION = "5.15.0-1075-nvidia"
DRIVER_VERSION = "550.127.08"
CUDA_VERSION = "12.4"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d")
CREATED = "2024-11-04T09:12:37Z"
HEARTBEAT = "2024-11-20T16:41:03Z"

# Per-product facts GFD derives from NVML (memory in MiB, compute capability,
# family) and the instance type a cloud would put such GPUs in.
PRODUCTS = {
    "NVIDIA-H100-80GB-HBM3": {"memory": 81559, "cc": (9, 0), "family": "hopper", "mig": True,
                              "instance": "p5.48xlarge", "cpu": 192, "mem_gi": 2048},
    "NVIDIA-H200": {"memory": 143771, "cc": (9, 0), "family": "hopper", "mig": True,
                    "instance": "p5e.48xlarge", "cpu": 192, "mem_gi": 2048},
    "NVIDIA-A100-SXM4-80GB": {"memory": 81920, "cc": (8, 0), "family": "ampere", "mig": True,
                              "instance": "p4de.24xlarge", "cpu": 96, "mem_gi": 1152},
    "NVIDIA-L4": {"memory": 23034, "cc": (8, 9), "family": "ada-lovelace", "mig": False,
                  "instance": "g6.12xlarge", "cpu": 48, "mem_gi": 192},
}

# What a GPU node's kubelet reports in status.images: the operator's operands,
# the CNI and CSI daemons, and a few workloads' images.  (names, size bytes)
_IMAGES = (
    (("nvcr.io/nvidia/cuda", "12.4.1-base-ubuntu22.04"), 91342118),
    (("nvcr.io/nvidia/k8s/dcgm-exporter", "3.3.8-3.6.0-ubuntu22.04"), 349773561),
    (("nvcr.io/nvidia/k8s-device-plugin", "v0.16.2"), 139411882),
    (("nvcr.io/nvidia/gpu-feature-discovery", "v0.8.2-ubi8"), 65473922),
    (("nvcr.io/nvidia/driver", "550.127.08-ubuntu22.04"), 512736220),
    (("nvcr.io/nvidia/k8s/container-toolkit", "v1.16.2-ubuntu20.04"), 126711384),
    (("nvcr.io/nvidia/cloud-native/gpu-operator-validator", "v24.6.2"), 192866710),
    (("nvcr.io/nvidia/cloud-native/k8s-mig-manager", "v0.8.0-ubuntu20.04"), 167452891),
    (("nvcr.io/nvidia/pytorch", "24.10-py3"), 9781232871),
    (("nvcr.io/nvidia/tritonserver", "24.10-py3"), 7512983552),
    (("registry.k8s.io/kube-proxy", KUBELET_VERSION), 30216346),
    (("registry.k8s.io/pause", "3.10"), 320368),
    (("registry.k8s.io/sig-storage/csi-node-driver-registrar", "v2.11.1"), 10996521),
    (("registry.k8s.io/sig-storage/livenessprobe", "v2.13.1"), 9866423),
    (("registry.k8s.io/nfd/node-feature-discovery", "v0.16.4"), 76983210),
    (("docker.io/calico/node", "v3.28.2"), 145923744),
    (("docker.io/calico/cni", "v3.28.2"), 94428411),
    (("docker.io/fluent/fluent-bit", "3.1.9"), 33011843),
    (("quay.io/prometheus/node-exporter", "v1.8.2"), 11872561),
    (("public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver", "v1.36.0"), 32177804),
)


def _digest(*parts):
    return hashlib.sha256("/".join(str(p) for p in parts).encode()).hexdigest()


def _uuid(*parts):
    return str(uuid.UUID(_digest(*parts)[:32]))


def _ip(i):
    """Unique for the first 6.4 million indexes; never .0, .1 or .255."""
    return "10.%d.%d.%d" % (100 + (i // 64000) % 100, (i // 250) % 256, 2 + i % 250)


def _images(i, gpu):
    out = []
    for (repo, tag), size in _IMAGES:
        if not gpu and repo.startswith("nvcr.io/nvidia"):
            continue
        digest = _digest(repo, tag)
        # kubelet lists the repo@digest first, then repo:tag
        out.append({"names": ["%s@sha256:%s" % (repo, digest), "%s:%s" % (repo, tag)],
                    "sizeBytes": size + (i % 7) * 4096})
    return out


def _conditions(disk_msg="kubelet has no disk pressure"):
    rows = (
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", disk_msg),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    )
    return [{"type": t, "status": s, "lastHeartbeatTime": HEARTBEAT, "lastTransitionTime": CREATED,
             "reason": r, "message": m} for t, s, r, m in rows]


def _base_node(name, i, zone, instance, cpu, mem_gi, labels, annotations, gpu):
    pods = 110 if not gpu else 250
    eph_gi = 1800 if gpu else 100
    mem_ki = mem_gi * 1024 * 1024
    capacity = {
        "cpu": str(cpu), "memory": "%dKi" % mem_ki, "pods": str(pods),
        "ephemeral-storage": "%dKi" % (eph_gi * 1024 * 1024),
        "hugepages-1Gi": "0", "hugepages-2Mi": "0",
    }
    # kubelet reserves system/kube resources and the eviction threshold
    allocatable = {
        "cpu": "%dm" % (cpu * 1000 - 190 - (cpu // 32) * 10),
        "memory": "%dKi" % (mem_ki - 1751196 - 100 * 1024),
        "pods": str(pods),
        "ephemeral-storage": str(eph_gi * 1024 * 1024 * 1024 * 9 // 10),
        "hugepages-1Gi": "0", "hugepages-2Mi": "0",
    }
    ip = _ip(i)
    region = zone[:-1]
    labels = dict({
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/instance-type": instance,
        "failure-domain.beta.kubernetes.io/region": region,
        "failure-domain.beta.kubernetes.io/zone": zone,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": instance,
        "topology.kubernetes.io/region": region,
        "topology.kubernetes.io/zone": zone,
        "topology.ebs.csi.aws.com/zone": zone,
        "node-role.kubernetes.io/worker": "",
    }, **labels)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": _uuid("node-uid", name),
            "creationTimestamp": CREATED,
            "labels": labels,
            "annotations": dict({
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid":
                    '{"ebs.csi.aws.com":"i-%s","efs.csi.aws.com":"i-%s"}' % (_digest("i", i)[:17], _digest("i", i)[:17]),
                "projectcalico.org/IPv4Address": ip + "/19",
                "projectcalico.org/IPv4VXLANTunnelAddr": "192.168.%d.%d" % ((i >> 6) & 0xFF, 64 + (i & 63)),
            }, **annotations),
        },
        "spec": {
            "podCIDR": "10.244.%d.0/24" % (i & 0xFF),
            "podCIDRs": ["10.244.%d.0/24" % (i & 0xFF)],
            "providerID": "aws:///%s/i-%s" % (zone, _digest("i", i)[:17]),
        },
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": _conditions(),
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "InternalDNS", "address": "ip-%s.ec2.internal" % ip.replace(".", "-")},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": _digest("machine", i)[:32],
                "systemUUID": _uuid("system", i).upper(),
                "bootID": _uuid("boot", i),
                "kernelVersion": KERNEL_VERSION,
                "osImage": OS_IMAGE,
                "containerRuntimeVersion": CONTAINERD_VERSION,
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": _images(i, gpu),
            "volumesInUse": [],
        },
    }


def _gfd_labels(gpus, product):
    """The labels GPU Feature Discovery, NFD and the GPU Operator put on a
    GPU node (reference/device-plugin.md section 4; gpu.deploy.* from the
    operator)."""
    p = PRODUCTS.get(product, PRODUCTS["NVIDIA-H100-80GB-HBM3"])
    major, minor, rev = DRIVER_VERSION.split(".")
    cmaj, cmin = CUDA_VERSION.split(".")
    labels = {
        "nvidia.com/gfd.timestamp": "1731600000",
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev,
        "nvidia.com/cuda.driver-version.full": DRIVER_VERSION,
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.runtime-version.major": cmaj,
        "nvidia.com/cuda.runtime-version.minor": cmin,
        "nvidia.com/cuda.runtime-version.full": CUDA_VERSION,
        "nvidia.com/cuda.runtime.major": cmaj,
        "nvidia.com/cuda.runtime.minor": cmin,
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": str(p["memory"]),
        "nvidia.com/gpu.family": p["family"],
        "nvidia.com/gpu.compute.major": str(p["cc"][0]),
        "nvidia.com/gpu.compute.minor": str(p["cc"][1]),
        "nvidia.com/gpu.machine": p["instance"].replace(".", "-"),
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/mig.capable": "true" if p["mig"] else "false",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.deploy.driver": "true",
        "nvidia.com/gpu.deploy.container-toolkit": "true",
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
        "nvidia.com/gpu.deploy.dcgm-exporter": "true",
        "nvidia.com/gpu.deploy.dcgm": "true",
        "nvidia.com/gpu.deploy.operator-validator": "true",
        "nvidia.com/gpu.deploy.node-status-exporter": "true",
        "feature.node.kubernetes.io/pci-10de.present": "true",
    }
    if p["mig"]:
        labels["nvidia.com/gpu.deploy.mig-manager"] = "true"
        labels["nvidia.com/mig.config"] = "all-disabled"
        labels["nvidia.com/mig.config.state"] = "success"
        labels["nvidia.com/mig.strategy"] = "single"
    return labels


def _nfd_labels(i):
    """A representative subset of node-feature-discovery's CPU, kernel and
    system labels, which dominate a real node's label map."""
    labels = {}
    for feat in ("ADX", "AESNI", "AVX", "AVX2", "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512F",
                 "AVX512VL", "AVX512VNNI", "FMA3", "GFNI", "SHA", "VAES", "VPCLMULQDQ", "AMXBF16",
                 "AMXINT8", "AMXTILE"):
        labels["feature.node.kubernetes.io/cpu-cpuid.%s" % feat] = "true"
    labels.update({
        "feature.node.kubernetes.io/cpu-cpuid.HYPERVISOR": "true",
        "feature.node.kubernetes.io/cpu-hardware_multithreading": "true",
        "feature.node.kubernetes.io/cpu-model.family": "6",
        "feature.node.kubernetes.io/cpu-model.id": "143",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
        "feature.node.kubernetes.io/kernel-config.NO_HZ": "true",
        "feature.node.kubernetes.io/kernel-config.NO_HZ_IDLE": "true",
        "feature.node.kubernetes.io/kernel-version.full": KERNEL_VERSION,
        "feature.node.kubernetes.io/kernel-version.major": "5",
        "feature.node.kubernetes.io/kernel-version.minor": "15",
        "feature.node.kubernetes.io/kernel-version.revision": "0",
        "feature.node.kubernetes.io/memory-numa": "true",
        "feature.node.kubernetes.io/pci-1d0f.present": "true",
        "feature.node.kubernetes.io/storage-nonrotationaldisk": "true",
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID.major": "22",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID.minor": "04",
    })
    return labels


def make_gpu_node(i, gpus=8, product="NVIDIA-H100-80GB-HBM3", taint=False):
    """A GPU node named gpu-node-%05d with `gpus` GPUs of `product`, labelled
    as GFD/NFD/the operator label it, with nvidia.com/gpu capacity.  With
    taint=True it carries nvidia.com/gpu=present:NoSchedule, the taint GPU
    node pools commonly use to keep other pods off."""
    p = PRODUCTS.get(product, PRODUCTS["NVIDIA-H100-80GB-HBM3"])
    name = "gpu-node-%05d" % i
    labels = _nfd_labels(i)
    labels.update(_gfd_labels(gpus, product))
    annotations = {
        "nfd.node.kubernetes.io/feature-labels": ",".join(sorted(
            k.split("/", 1)[1] for k in labels if k.startswith("feature.node.kubernetes.io/"))),
        "nfd.node.kubernetes.io/extended-resources": "",
        "nfd.node.kubernetes.io/master.version": "v0.16.4",
        "nvidia.com/gpu-driver-upgrade-enabled": "true",
    }
    node = _base_node(name, i, ZONES[i % len(ZONES)], p["instance"], p["cpu"], p["mem_gi"],
                      labels, annotations, gpu=True)
    for key in ("capacity", "allocatable"):
        node["status"][key]["nvidia.com/gpu"] = str(gpus)
    node["status"]["capacity"]["hugepages-1Gi"] = "0"
    if taint:
        node["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    return node


def make_plain_node(i):
    """A CPU-only worker node named node-%05d (about 5 KB)."""
    name = "node-%05d" % i
    return _base_node(name, i + 1000000, ZONES[i % len(ZONES)], "m6i.4xlarge", 16, 64,
                      {}, {}, gpu=False)
