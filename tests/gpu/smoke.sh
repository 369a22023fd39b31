#!/usr/bin/env bash
# GPU smoke test, for a machine with a real NVIDIA GPU and driver (no package
# network needed).  Builds gpuop (or reuses build/ when the tools to build are
# missing), then checks gpuop against the real libnvidia-ml.so.1 and against
# nvidia-smi.  Prints one PASS/FAIL line per check and a summary; exits 1 if
# any check failed.  Finishes in well under 3 minutes.
#
#   tests/gpu/smoke.sh            # from the repository root
set -uo pipefail
cd "$(dirname "$0")/../.."

pass=0 fail=0
check() { # check NAME CONDITION-EXIT-STATUS [DETAIL]
  if [ "$2" -eq 0 ]; then echo "PASS $1${3:+: $3}"; pass=$((pass+1));
  else echo "FAIL $1${3:+: $3}"; fail=$((fail+1)); fi
}

BUILD=${BUILD:-build-gpu}
start=$(date +%s)
if command -v cmake >/dev/null && pkg-config --exists jansson yaml-0.1 cmocka 2>/dev/null; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
    cmake --build "$BUILD" -j"$(nproc)" >/tmp/gpuop-smoke-build.log 2>&1
  check "build" $? "$BUILD ($(( $(date +%s) - start )) s; log /tmp/gpuop-smoke-build.log)"
else
  BUILD=build
  [ -x "$BUILD/gpuop" ]
  check "prebuilt binary" $? "cmake or -dev packages missing here; using $BUILD/gpuop"
fi
GPUOP="$BUILD/gpuop"
[ -x "$GPUOP" ] || { echo "FAIL no gpuop binary"; echo "0 passed, 1 failed"; exit 1; }

command -v nvidia-smi >/dev/null
check "nvidia-smi present" $? "$(command -v nvidia-smi)"
nvidia-smi -L

unset GPUOP_SIMULATE GPUOP_NVML_LIB GPUOP_SIM_STATE
"$GPUOP" info --json >/tmp/gpuop-info.json 2>/tmp/gpuop-info.err
check "gpuop info --json (real driver)" $? "$(head -c 300 /tmp/gpuop-info.err)"
"$GPUOP" info
time_out=$( { /usr/bin/time -f '%e s, %M KiB max RSS' "$GPUOP" info --json >/dev/null; } 2>&1 | tail -1)
echo "INFO gpuop info --json: $time_out"

# Field-by-field against nvidia-smi.
nvidia-smi --query-gpu=index,name,uuid,memory.total,pci.bus_id,driver_version \
  --format=csv,noheader,nounits >/tmp/gpuop-smi.csv
cat >/tmp/gpuop-compare.py <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
rows = [[c.strip() for c in l.split(",")] for l in open(sys.argv[2]) if l.strip()]
def line(ok, name, detail):
    print(("PASS " if ok else "FAIL ") + name + ": " + detail)
line(len(rows) == doc["gpu_count"], "GPU count", f"nvidia-smi {len(rows)}, gpuop {doc['gpu_count']}")
for idx, name, uuid, mem, bus, drv in rows:
    g = doc["gpus"][int(idx)]
    line(g["name"] == name, f"GPU {idx} name", f"{g['name']!r} vs {name!r}")
    line(g["uuid"] == uuid, f"GPU {idx} uuid", f"{g['uuid']} vs {uuid}")
    line(str(g["memory_mib"]) == mem, f"GPU {idx} memory MiB", f"{g['memory_mib']} vs {mem}")
    line(g["bus_id"].upper() == bus.upper(), f"GPU {idx} bus id", f"{g['bus_id']} vs {bus}")
    line(doc["driver_version"] == drv, f"GPU {idx} driver version", f"{doc['driver_version']} vs {drv}")
PY
while read -r l; do
  echo "$l"
  case "$l" in PASS*) pass=$((pass+1));; FAIL*) fail=$((fail+1));; esac
done < <(python3 /tmp/gpuop-compare.py /tmp/gpuop-info.json /tmp/gpuop-smi.csv 2>&1 || echo "FAIL comparison script")

# The binding's own tests against the real library.
if [ -x "$BUILD/tests/test_nvml_real" ]; then
  GPUOP_REQUIRE_GPU=1 timeout 120 "$BUILD/tests/test_nvml_real"
  check "binding tests against the real libnvidia-ml.so.1" $?
else
  check "binding tests against the real libnvidia-ml.so.1" 1 "test_nvml_real not built"
fi

# The node's plugin socket dir and exporter port stay private to this run.
mkdir -p /tmp/gpuop-smoke-dp
DP_PLUGIN_DIR=/tmp/gpuop-smoke-dp GPUOP_EXPORTER_LISTEN=127.0.0.1:0 GPUOP_FEATURES_FILE=/tmp/gpuop-smoke-gfd \
  "$GPUOP" node --once >/tmp/gpuop-node.txt 2>&1
check "gpuop node --once readiness" $? "$(grep -E '^ +\[(FAIL|warn)' /tmp/gpuop-node.txt | head -3 | tr -s ' ')"

# A CDI spec for the real GPUs, checked against the CDI rules.
"$GPUOP" cdi generate --output /tmp/gpuop-smoke-cdi.yaml 2>/tmp/gpuop-cdi.err &&
  "$GPUOP" cdi validate /tmp/gpuop-smoke-cdi.yaml
check "gpuop cdi generate + validate (real driver root)" $? "$(head -c 300 /tmp/gpuop-cdi.err)"
sed -n '/Readiness/,$p' /tmp/gpuop-node.txt

# The validator's CUDA layer: a vector add on every GPU through libcuda.
# This is the only place its embedded PTX meets a real driver's JIT.
V=/tmp/gpuop-smoke-validations
mkdir -p "$V"
"$GPUOP" validate driver --validations-dir "$V" >/dev/null 2>&1
"$GPUOP" validate toolkit --validations-dir "$V" --cdi-spec /tmp/gpuop-smoke-cdi.yaml >/dev/null 2>&1
timeout 120 "$GPUOP" validate cuda --validations-dir "$V" --json >/tmp/gpuop-cuda.json 2>/tmp/gpuop-cuda.err
check "gpuop validate cuda (vector add on every GPU)" $? \
  "$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("; ".join(l["state"]+": "+l["detail"] for l in d["layers"]))' /tmp/gpuop-cuda.json 2>/dev/null || head -c 300 /tmp/gpuop-cuda.err)"

# Feature discovery on real GPUs: GFD's labels, product and count as nvidia-smi says.
"$GPUOP" discover --oneshot --no-timestamp --output - >/tmp/gpuop-labels.txt 2>/tmp/gpuop-labels.err
smi_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '-' | tr -cd 'A-Za-z0-9._-')
smi_count=$(nvidia-smi -L | grep -c '^GPU ')
grep -qx "nvidia.com/gpu.product=$smi_name" /tmp/gpuop-labels.txt &&
  grep -qx "nvidia.com/gpu.count=$smi_count" /tmp/gpuop-labels.txt
check "gpuop discover labels (product, count)" $? "$(grep -E 'gpu\.(product|count|family|memory)=' /tmp/gpuop-labels.txt | tr '\n' ' ')"
cat /tmp/gpuop-labels.txt

# preflight and doctor read the real host; printed for the record.
"$GPUOP" preflight >/tmp/gpuop-preflight.txt 2>&1
echo "INFO gpuop preflight exit $?"; cat /tmp/gpuop-preflight.txt
"$GPUOP" doctor --no-api >/tmp/gpuop-doctor.txt 2>&1
echo "INFO gpuop doctor exit $?"; cat /tmp/gpuop-doctor.txt

echo "smoke finished in $(( $(date +%s) - start )) s"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
