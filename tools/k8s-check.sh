#!/usr/bin/env bash
# k8s-check.sh — checks what deploy/k8s and deploy/Containerfile ship, without a
# cluster or a container engine (`make k8s-check`, run by CI):
#
#   1. schemas: every manifest under deploy/k8s (examples/ too) is validated
#      against the Kubernetes API schemas of each version in K8S_VERSIONS,
#      strictly (unknown fields fail), with kubernetes-validate from PyPI,
#      pinned with its dependencies and installed into a venv under $BUILD;
#   2. consistency: the manifests agree with each other, with the config the
#      ConfigMap carries and with the image (CONSISTENCY_PY below: socket
#      mode, paths, users and groups, probes and metrics port, GPUs, tags);
#   3. the image: the Containerfile's run-time packages hold every shared
#      library tesserad and tessera-cli need (readelf + dpkg -S), it carries the
#      NVRTC the daemon looks for, and every file it copies is in the staged
#      build context (deploy/build-image.sh --context-only);
#   4. the entrypoint: deploy/entrypoint.sh, the image's entrypoint, is started
#      with the ConfigMap's config (extracted with python3-yaml), only the
#      socket and cache paths moved into a temporary directory and the backend
#      set to cpu, in a network namespace of its own where one can be made (so
#      metrics_listen binds as written; elsewhere its port is moved to a free
#      one); /healthz and /readyz must answer 200, `tessera-cli health` ready,
#      /metrics the build_info family, the socket must be mode 0660 and the log
#      JSON lines; SIGTERM must end it with status 0. It must also refuse, with
#      a message naming the directory, a socket directory its user cannot
#      write, and warn about a missing GPU when the backend is cuda.
#
# The image itself is not built here (no container engine): `make image`.
# Needs: $BUILD/bin/tesserad and tessera-cli (make all), python3 with yaml and
# ensurepip (python3-yaml, python3-venv), PyPI the first time (the venv is kept
# and reused while the pins are unchanged), readelf and dpkg.
# Ends with `k8s-check: N passed, N failed`; exit 1 on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

export BUILD=${BUILD:-build}
K8S_VERSIONS=${K8S_VERSIONS:-1.29.0 1.37.0}
# kubernetes-validate and its dependencies, installed with --no-deps and then
# checked with `pip check`, so nothing unpinned comes in.
PINS=(kubernetes-validate==1.37.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1
      referencing==0.37.0 rpds-py==2026.9.1 attrs==26.1.0 importlib_resources==7.1.0
      packaging==26.4 PyYAML==6.0.4 typing_extensions==4.16.0)

tesserad=$BUILD/bin/tesserad
cli=$BUILD/bin/tessera-cli

# ---- the local run (step 4), started by the main part, maybe in a namespace ----
if [ "${1:-}" = --local-run ]; then
    work=$2
    if [ "${3:-}" = --netns ]; then
        ip link set lo up
    fi
    url=ipc://$work/run/tesserad.sock
    metrics=$(cat "$work/metrics-url")
    result() { echo "$1 - $2"; }
    http() { "$py" -c '
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=5)
    print(r.status, r.read().decode().strip().splitlines()[0] if sys.argv[2] == "first" else r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
except Exception as e:
    print("000", e)
' "$1" "${2:-first}"; }
    py=$(cat "$work/python")

    # A GPU backend without a GPU: the entrypoint's warning, then tesserad's error.
    if [ ! -e /dev/nvidiactl ]; then
        rc=0
        TESSERAD_BIN=$tesserad TESSERAD_CONFIG=$work/tesserad.json timeout 60 \
            deploy/entrypoint.sh --listen "ipc://$work/gpu/tesserad.sock" \
            --cache-dir "$work/gpu-cache" >"$work/gpu.log" 2>&1 || rc=$?
        if [ "$rc" -ne 0 ] && grep -q 'no /dev/nvidiactl' "$work/gpu.log"; then
            result ok "without a GPU the ConfigMap's cuda backend stops start-up (status $rc) after the entrypoint's warning: $(grep -v 'no /dev/nvidiactl' "$work/gpu.log" | tail -n 1 | cut -c1-150)"
        else
            result FAIL "without a GPU, expected the entrypoint's warning and a failed start; status $rc: $(tail -n 3 "$work/gpu.log")"
        fi
    fi

    TESSERAD_BIN=$tesserad TESSERAD_CONFIG=$work/tesserad.json \
        deploy/entrypoint.sh --listen "$url" --cache-dir "$work/cache" --backend cpu \
        >"$work/tesserad.log" 2>&1 &
    pid=$!
    state=
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || break
        state=$("$cli" --url "$url" --timeout 1000 health 2>/dev/null) && break
        sleep 0.2
    done
    if [[ $state == ready* ]]; then
        result ok "the entrypoint started tesserad with the ConfigMap's config; tessera-cli health: $state"
    else
        result FAIL "tesserad did not become ready: $(tail -n 5 "$work/tesserad.log")"
    fi
    for probe in "/healthz 200 alive" "/readyz 200 ready" "/v2/health/ready 200 ready"; do
        read -r path code body <<<"$probe"
        got=$(http "$metrics$path")
        if [ "$got" = "$code $body" ]; then
            result ok "GET $path on the metrics listener: $got"
        else
            result FAIL "GET $path: expected '$code $body', got '$got'"
        fi
    done
    # Read whole first: grep -q stops at the first match, and under pipefail the
    # writer's broken pipe would fail the check.
    metrics_text=$(http "$metrics/metrics" all)
    if grep -q '^tesserad_build_info{' <<<"$metrics_text"; then
        result ok "GET /metrics serves tesserad_build_info"
    else
        result FAIL "GET /metrics has no tesserad_build_info"
    fi
    mode=$(stat -c %a "$work/run/tesserad.sock" 2>/dev/null || echo none)
    if [ "$mode" = 660 ]; then
        result ok "the socket is mode 0660 (owner and group only)"
    else
        result FAIL "the socket's mode is $mode, not 660"
    fi
    if [ -f "$work/cache/kcache.key" ]; then
        result ok "the kernel cache directory was opened ($(stat -c %a "$work/cache/kcache.key") key file)"
    else
        result FAIL "no kcache.key in the cache directory"
    fi
    kill -TERM "$pid" 2>/dev/null || true
    rc=0
    wait "$pid" || rc=$?
    if [ "$rc" -eq 0 ] && [ ! -e "$work/run/tesserad.sock" ]; then
        result ok "SIGTERM: tesserad drained and exited 0, socket removed"
    else
        result FAIL "SIGTERM: exit status $rc$([ -e "$work/run/tesserad.sock" ] && echo ', the socket is left')"
    fi
    if "$py" -c '
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
assert lines, "no log lines"
for l in lines:
    json.loads(l)
print(len(lines))' "$work/tesserad.log" >"$work/json-lines" 2>&1; then
        result ok "the log is JSON lines (log_format json): $(cat "$work/json-lines") lines"
    else
        result FAIL "the log is not all JSON lines: $(tail -n 2 "$work/json-lines")"
    fi
    exit 0
fi

# ---- the main part ----
# The Python parts, run with the interpreter that has yaml.

# Step 2: the manifests against each other, the ConfigMap's config and the
# image. Prints one "ok - ..." or "FAIL - ..." line per check.
read -r -d '' CONSISTENCY_PY <<'EOF' || true
import glob, json, os, re, sys
import yaml

version = sys.argv[1]
def report(ok, what):
    print(("ok - " if ok else "FAIL - ") + what)

top = sorted(glob.glob("deploy/k8s/*.yaml"))
examples = sorted(glob.glob("deploy/k8s/**/*.yaml", recursive=True))
examples = [f for f in examples if f not in top]
objs = []
for f in top + examples:
    with open(f) as fh:
        for d in yaml.safe_load_all(fh):
            if d:
                objs.append((f, d))
def one(kind, name=None):
    found = [d for f, d in objs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return found[0] if len(found) == 1 else None

# Namespaces: `kubectl apply -f deploy/k8s/` applies the files in name order.
made = set()
order_ok = True
for f, d in objs:
    if d["kind"] == "Namespace":
        made.add(d["metadata"]["name"])
    ns = d["metadata"].get("namespace")
    if ns and ns != "default" and ns not in made:
        order_ok = False
        report(False, f"{f}: {d['kind']} {d['metadata']['name']} is in namespace {ns}, not made before it")
report(order_ok and bool(made), f"every object's namespace is made by a Namespace applied before it ({', '.join(sorted(made))})")

cm = one("ConfigMap", "tesserad-config")
ds = one("DaemonSet", "tesserad")
svc = one("Service")
job = one("Job")
if cm is None or ds is None or svc is None or job is None:
    report(False, "expected one ConfigMap tesserad-config, one DaemonSet tesserad, one Service and one example Job")
    sys.exit(0)
conf = json.loads(cm["data"]["tesserad.json"])
report(True, "the ConfigMap's tesserad.json is JSON")
pod = ds["spec"]["template"]["spec"]
main = pod["containers"][0]
init = pod["initContainers"][0]
vols = {v["name"]: v for v in pod["volumes"]}
def mount_of(c, path):
    for m in c["volumeMounts"]:
        if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/"):
            return m
    return None

env = {e["name"]: e.get("value") for e in main.get("env", [])}
conf_path = env.get("TESSERAD_CONFIG", "/etc/tesserad/tesserad.json")
m = mount_of(main, conf_path)
report(m is not None and vols[m["name"]].get("configMap", {}).get("name") == "tesserad-config"
       and os.path.basename(conf_path) == "tesserad.json",
       f"the container reads the ConfigMap at {conf_path}")

mode = int(conf.get("ipc_mode", "0660"), 8)
report(mode & 0o007 == 0, f"ipc_mode {conf.get('ipc_mode', '0660')} gives nothing to other users")

sockets = [u[len("ipc://"):] for u in conf.get("listen", ["ipc:///run/tesserad/tesserad.sock"]) if u.startswith("ipc://")]
hostdirs = []
for s in sockets:
    m = mount_of(main, s)
    hp = vols[m["name"]].get("hostPath") if m else None
    report(hp is not None, f"socket {s} is on a hostPath volume ({hp['path'] if hp else 'none'})")
    if hp:
        hostdirs.append(m["mountPath"])
cache = conf.get("cache_dir", "/var/cache/tesserad")
m = mount_of(main, cache)
report(m is not None and m["mountPath"] == cache and "hostPath" in vols[m["name"]],
       f"cache_dir {cache} is a hostPath volume of its own")
if m:
    hostdirs.append(cache)

sc = main.get("securityContext", {})
uid, gid = sc.get("runAsUser"), sc.get("runAsGroup")
report(uid not in (None, 0) and gid not in (None, 0) and sc.get("runAsNonRoot") is True
       and sc.get("allowPrivilegeEscalation") is False and not sc.get("privileged")
       and sc.get("capabilities", {}).get("drop") == ["ALL"],
       f"the daemon runs unprivileged as {uid}:{gid}, no capabilities, no privilege escalation")
cmd = " ".join(init.get("command", []) + init.get("args", []))
init_mounts = {mm["mountPath"] for mm in init["volumeMounts"]}
report(all(d in init_mounts and re.search(rf"chown (-R -h )?{uid}:{gid} {re.escape(d)}\b", cmd) for d in hostdirs),
       f"the initContainer chowns {', '.join(hostdirs)} to {uid}:{gid}")
cf = open("deploy/Containerfile").read()
report(f"--uid {uid} " in cf and f"--gid {gid} " in cf and f"USER {uid}:{gid}" in cf,
       f"the image's tesserad user is {uid}:{gid}")

# Probes and metrics, all on the metrics listener's port.
ml = re.fullmatch(r"http://([^:/]+):(\d+)", conf.get("metrics_listen", ""))
port = int(ml.group(2)) if ml else None
report(ml is not None and ml.group(1) in ("0.0.0.0", "[::]"),
       f"metrics_listen {conf.get('metrics_listen')} is reachable on the pod IP")
ports = {p["name"]: p["containerPort"] for p in main.get("ports", [])}
def probe(name):
    p = main.get(name, {}).get("httpGet", {})
    pp = p.get("port")
    return p.get("path"), ports.get(pp, pp)
report(probe("livenessProbe") == ("/healthz", port), f"liveness: GET /healthz on {port}")
report(probe("readinessProbe") == ("/readyz", port), f"readiness: GET /readyz on {port}")
report(probe("startupProbe") in (("/healthz", port), (None, None)), "start-up probe on /healthz")
ann = ds["spec"]["template"]["metadata"].get("annotations", {})
report(ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/port") == str(port)
       and ann.get("prometheus.io/path") == "/metrics", f"the pods are annotated for scraping :{port}/metrics")
sp = svc["spec"]["ports"][0]
report(svc["spec"]["selector"] == ds["spec"]["selector"]["matchLabels"]
       and ports.get(sp["targetPort"], sp["targetPort"]) == port and svc["spec"].get("publishNotReadyAddresses") is True,
       f"Service {svc['metadata']['name']} selects the daemon's pods on {port}, ready or not")

# GPUs: all of them, through the runtime, none through the device plugin.
res = main.get("resources", {})
gpu_asked = any("nvidia.com/gpu" in res.get(k, {}) for k in ("limits", "requests"))
report(not gpu_asked and env.get("NVIDIA_VISIBLE_DEVICES") == "all" and pod.get("runtimeClassName") == "nvidia"
       and "compute" in (env.get("NVIDIA_DRIVER_CAPABILITIES") or ""),
       "every GPU of the node: runtimeClassName nvidia, NVIDIA_VISIBLE_DEVICES=all, no nvidia.com/gpu request")
sel = pod.get("nodeSelector", {})
tol = {(t["key"], t.get("effect")) for t in pod.get("tolerations", [])}
report(any((k, "NoSchedule") in tol for k in sel), f"the DaemonSet selects and tolerates its node label/taint {list(sel)}")
report(ds["spec"]["updateStrategy"].get("rollingUpdate", {}).get("maxSurge") in (0, "0", None),
       "a rollout never runs two daemons on one node (maxSurge 0)")
report(pod.get("terminationGracePeriodSeconds", 30) >= 30, "SIGTERM has time to drain")

# Images: the tag make image builds.
images = [(f, c["name"], c["image"]) for f, d in objs if d["kind"] in ("DaemonSet", "Job")
          for c in d["spec"]["template"]["spec"].get("initContainers", []) + d["spec"]["template"]["spec"]["containers"]]
bad = [f"{f}:{n}={i}" for f, n, i in images if i.rsplit(":", 1)[-1] != version]
report(not bad, f"every image is tagged {version}, the version make image tags" + (": " + ", ".join(bad) if bad else ""))

# The example client: the socket's group, the socket directory, the URL.
jp = job["spec"]["template"]["spec"]
jc = jp["containers"][0]
jenv = {e["name"]: e.get("value") for e in jc.get("env", [])}
jvols = {v["name"]: v for v in jp["volumes"]}
url = "ipc://" + sockets[0] if sockets else None
jm = mount_of(jc, sockets[0]) if sockets else None
host_sock_dir = vols[mount_of(main, sockets[0])["name"]]["hostPath"]["path"] if sockets else None
report(gid in jp.get("securityContext", {}).get("supplementalGroups", []), f"the example client has the socket's group {gid}")
report(jm is not None and jvols[jm["name"]].get("hostPath", {}).get("path") == host_sock_dir and jenv.get("TESSERA_URL") == url,
       f"the example client mounts {host_sock_dir} and dials {url}")
jsc = jp.get("securityContext", {})
report(jsc.get("runAsUser") not in (None, 0, uid), "the example client runs as a user of its own")
jsel = jp.get("nodeSelector", {})
report(jsel == sel and all((k, "NoSchedule") in {(t["key"], t.get("effect")) for t in jp.get("tolerations", [])} for k in sel)
       and not any("nvidia.com/gpu" in jc.get("resources", {}).get(k, {}) for k in ("limits", "requests")),
       "the example client runs on tesserad nodes and asks for no GPU")
EOF

# Step 3: the Debian packages the Containerfile's last stage installs.
read -r -d '' RUNTIME_PACKAGES_PY <<'EOF' || true
import re
text = open("deploy/Containerfile").read().replace("\\\n", " ")
stages = re.split(r"(?m)^FROM ", text)
for line in stages[-1].splitlines():
    if line.startswith("RUN ") and "apt-get install" in line:
        args = line.split("apt-get install", 1)[1].split("&&")[0].split()
        for a in args:
            if not a.startswith("-"):
                print(a)
EOF

# shellcheck source=tools/find-python.sh
. tools/find-python.sh
passed=0
failed=0
tally() {
    while IFS= read -r line; do
        echo "  $line"
        case $line in
            ok\ *) passed=$((passed + 1)) ;;
            FAIL\ *) failed=$((failed + 1)) ;;
        esac
    done
}

for f in "$tesserad" "$cli"; do
    if [ ! -x "$f" ]; then
        echo "k8s-check: $f is missing: build it first (make BUILD=$BUILD all)" >&2
        exit 1
    fi
done
if ! find_python yaml; then
    echo "k8s-check: no python3 with the yaml module (Debian's python3-yaml; tools/install-deps.sh installs it)" >&2
    exit 1
fi
yaml_py=$py

echo "==> k8s-check 1: manifests against the Kubernetes API schemas (${K8S_VERSIONS// /, })"
venv=$BUILD/k8s-venv
stamp="${PINS[*]}"
if [ ! -x "$venv/bin/kubernetes-validate" ] || [ "$(cat "$venv/pins" 2>/dev/null)" != "$stamp" ]; then
    if ! find_python venv ensurepip; then
        echo "k8s-check: no python3 that can make a venv (Debian's python3-venv; tools/install-deps.sh installs it)" >&2
        exit 1
    fi
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps "${PINS[@]}"
    "$venv/bin/pip" check >/dev/null
    echo "$stamp" >"$venv/pins"
fi
mapfile -t manifests < <(find deploy/k8s -name '*.yaml' -o -name '*.yml' | sort)
schemas() {
    local v out rc n
    for v in $K8S_VERSIONS; do
        out=$("$venv/bin/kubernetes-validate" --strict -k "$v" "${manifests[@]}" 2>&1) && rc=0 || rc=$?
        n=$(grep -c 'passed for resource' <<<"$out" || true)
        if [ "$rc" -eq 0 ]; then
            echo "ok - Kubernetes $v: $n objects in ${#manifests[@]} files valid (strict)"
        else
            echo "FAIL - Kubernetes $v: $(grep -v 'passed for resource' <<<"$out" | head -n 5)"
        fi
    done
}
tally < <(schemas)

echo "==> k8s-check 2: the manifests, the config and the image agree"
version=$(sed -n 's/^#define TSRD_VERSION "\(.*\)"/\1/p' daemon/config.h)
tally < <("$yaml_py" - "$version" <<<"$CONSISTENCY_PY")

echo "==> k8s-check 3: the Containerfile"
containerfile() {
    local runtime_pkgs missing bin lib path pkg context absent src
    # Run-time packages: the Debian package of every library the binaries name.
    runtime_pkgs=$("$yaml_py" - <<<"$RUNTIME_PACKAGES_PY")
    missing=()
    for bin in "$tesserad" "$cli"; do
        while read -r lib; do
            path=$(ldd "$bin" | awk -v l="$lib" '$1 == l {print $3}')
            pkg=$(dpkg -S "$path" 2>/dev/null || dpkg -S "$(readlink -f "$path")" 2>/dev/null || true)
            pkg=${pkg%%:*}
            # libc6 is in every Debian image.
            if [ -z "$pkg" ]; then
                missing+=("$lib (no Debian package owns $path)")
            elif [ "$pkg" != libc6 ] && ! grep -qx "$pkg" <<<"$runtime_pkgs"; then
                missing+=("$lib ($pkg)")
            fi
        done < <(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    done
    if [ ${#missing[@]} -eq 0 ]; then
        echo "ok - the run-time stage installs the package of every library tesserad and tessera-cli link"
    else
        echo "FAIL - the run-time stage lacks: ${missing[*]}"
    fi
    # NVRTC: a name the daemon tries, at the place the Containerfile puts it.
    if grep -q '"libnvrtc.so.13"' daemon/backend/cuda/nvrtc.c &&
        grep -q 'libnvrtc.so.13' deploy/Containerfile &&
        grep -q '^nvidia-cuda-nvrtc==13\.' deploy/cuda-requirements.txt; then
        echo "ok - the image carries libnvrtc.so.13 (nvidia-cuda-nvrtc 13), a name daemon/backend/cuda/nvrtc.c loads"
    else
        echo "FAIL - the NVRTC the image carries is not one daemon/backend/cuda/nvrtc.c loads"
    fi
    # Every pin of the CUDA requirements has a hash (pip --require-hashes).
    if ! grep -v '^#' deploy/cuda-requirements.txt | grep -v '^$' | grep -qv -- '==.* --hash=sha256:[0-9a-f]\{64\}$'; then
        echo "ok - deploy/cuda-requirements.txt pins every wheel by version and SHA-256"
    else
        echo "FAIL - deploy/cuda-requirements.txt has a line without a version and a SHA-256"
    fi
    # The build context and what the Containerfile copies from it.
    BUILD=$BUILD deploy/build-image.sh --context-only >/dev/null
    context=$BUILD/image-context
    absent=()
    while read -r src; do
        [ -e "$context/$src" ] || absent+=("$src")
    done < <(grep -E '^COPY ' deploy/Containerfile | grep -v -- '--from=' | awk '{for (i = 2; i < NF; i++) print $i}')
    if [ ${#absent[@]} -eq 0 ] && [ ! -e "$context/build" ] && [ -x "$context/deploy/entrypoint.sh" ]; then
        echo "ok - the staged build context ($(du -sh "$context" | cut -f1)) holds every file the Containerfile copies, no build/, an executable entrypoint"
    else
        echo "FAIL - the build context lacks: ${absent[*]:-} $([ -e "$context/build" ] && echo '(and holds build/)')"
    fi
}
tally < <(containerfile)

echo "==> k8s-check 4: the entrypoint with the ConfigMap's config"
work=$(mktemp -d "${TMPDIR:-/tmp}/tesserad-k8s.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/run" "$work/cache"
echo "$yaml_py" >"$work/python"
"$yaml_py" - "$work/tesserad.json" <<'EOF'
import sys, yaml
with open("deploy/k8s/tesserad.yaml") as f:
    for doc in yaml.safe_load_all(f):
        if doc and doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "tesserad-config":
            open(sys.argv[1], "w").write(doc["data"]["tesserad.json"])
            break
    else:
        sys.exit("k8s-check: no ConfigMap tesserad-config in deploy/k8s/tesserad.yaml")
EOF
metrics=$("$yaml_py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["metrics_listen"])' "$work/tesserad.json")
netns=()
if [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null && command -v ip >/dev/null &&
    unshare --net true 2>/dev/null; then
    netns=(unshare --net)
elif command -v unshare >/dev/null && command -v ip >/dev/null && unshare -rn true 2>/dev/null; then
    netns=(unshare -rn)
fi
if [ ${#netns[@]} -gt 0 ]; then
    echo "  (in a network namespace of its own: metrics_listen $metrics as written)"
    echo "http://127.0.0.1:${metrics##*:}" >"$work/metrics-url"
else
    port=$("$yaml_py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    echo "  (no network namespace can be made here: metrics_listen moved to 127.0.0.1:$port)"
    "$yaml_py" - "$work/tesserad.json" "$port" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["metrics_listen"] = "http://127.0.0.1:" + sys.argv[2]
json.dump(c, open(sys.argv[1], "w"))
EOF
    echo "http://127.0.0.1:$port" >"$work/metrics-url"
fi
entrypoint() {
    local rc
    # A socket directory the daemon's user cannot write: refused before tesserad
    # runs. As root the entrypoint runs as nobody, from a copy in the work
    # directory (the checkout may be closed to other users), with /bin/false
    # standing in for tesserad: reaching it would be the failure.
    mkdir -p "$work/root-owned"
    chmod 0755 "$work/root-owned" "$work"
    cp deploy/entrypoint.sh "$work/entrypoint.sh"
    chmod 0755 "$work/entrypoint.sh"
    chmod 0644 "$work/tesserad.json"
    as_other=()
    if [ "$(id -u)" -eq 0 ]; then
        as_other=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    else
        chmod 0555 "$work/root-owned"
    fi
    rc=0
    "${as_other[@]}" env TESSERAD_BIN=/bin/false TESSERAD_CONFIG="$work/tesserad.json" \
        "$work/entrypoint.sh" --listen "ipc://$work/root-owned/tesserad.sock" \
        --cache-dir "$work/root-owned" --backend cpu >"$work/refused.log" 2>&1 || rc=$?
    if [ "$rc" -eq 1 ] && grep -q "socket directory $work/root-owned .*cannot write" "$work/refused.log"; then
        echo "ok - an unwritable socket directory is refused by the entrypoint: $(cut -c1-160 "$work/refused.log")..."
    else
        echo "FAIL - an unwritable socket directory: status $rc, $(cat "$work/refused.log")"
    fi
    if [ ${#netns[@]} -gt 0 ]; then
        "${netns[@]}" "$0" --local-run "$work" --netns
    else
        "$0" --local-run "$work"
    fi
}
tally < <(entrypoint)

echo "k8s-check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
