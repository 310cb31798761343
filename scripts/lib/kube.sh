# The single-node Kubernetes the tests and `make cluster` run (tests/support/cluster.py):
# sourced by setup-host.sh after go-tools.sh, whose cache, log and locking it shares.
#
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl are one
# binary, `kube` (scripts/lib/kube/main.go), which runs as the program it is named by: setup
# links each name to it in .tools/bin. One binary links once, and the six programs' shared
# packages (client-go, apimachinery, the API types, etcd's client and server) compile once.
# It is built from a wrapper module that requires k8s.io/kubernetes and etcd's server at the
# versions below: `go install` refuses k8s.io/kubernetes (its go.mod replaces each staging
# module, k8s.io/api and the rest, by a folder of its own tree), so the wrapper replaces each
# by the same release's published module instead (v0.MINOR.PATCH for v1.MINOR.PATCH). The
# module proxy does not serve sample-cli-plugin and sample-controller; the sample modules are
# examples no command imports, so the wrapper leaves all three out. etcd is the release
# Kubernetes pins for that minor (build/dependencies.yaml of the release).
#
# Beside it, `kube-pause` (scripts/lib/kube/pause/main.go): the pod sandbox's process, since
# registry.k8s.io's pause image cannot be pulled here; the cluster makes an image of it.
#
# Cost, measured on 2 cores: see docs/development.md ("A Kubernetes cluster on this machine").

KUBE_VERSION=v1.34.4
KUBE_STAGING_VERSION=v0.34.4
ETCD_VERSION=v3.6.5
KUBE_STAGING=(
  api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
  cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
  cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
  kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
  mount-utils pod-security-admission
)
KUBE_PROGRAMS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

# The version every program reports (`kubectl version`, the node's kubeletVersion), stamped
# as Kubernetes' own release build stamps it (hack/lib/version.sh).
kube_ldflags() {
  local minor flags='-s -w' package
  minor=${KUBE_VERSION#v1.}
  minor=${minor%%.*}
  for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags="$flags -X $package.gitVersion=$KUBE_VERSION -X $package.gitMajor=1"
    flags="$flags -X $package.gitMinor=$minor -X $package.gitTreeState=clean"
  done
  printf '%s' "$flags"
}

# build_kube_binary NAME SOURCE_DIR: prints the cached binary's path. NAME is kube or
# kube-pause; SOURCE_DIR holds its main.go (kube's wrapper module is made here, the pause
# binary needs nothing but the standard library).
build_kube_binary() {
  local name=$1 source=$2
  local gover ldflags key out work lockfd staging started
  gover=$(go env GOVERSION)
  if [ "$name" = kube ]; then ldflags=$(kube_ldflags); else ldflags='-s -w'; fi
  key=$(printf '%s %s %s %s %s %s' "$KUBE_VERSION" "$ETCD_VERSION" "$gover" "$ldflags" \
    "${KUBE_STAGING[*]}" "$(cat "$source/main.go")" | sha256sum | cut -c1-12)
  out="$(go_tools_cache)/$name-$KUBE_VERSION-$key"
  mkdir -p "$(go_tools_cache)"
  exec {lockfd}>"$(go_tools_cache)/$name.lock"
  flock "$lockfd"
  if [ ! -x "$out" ]; then
    log "building $name $KUBE_VERSION from the Go module proxy (once per machine; kube takes minutes)"
    started=$(date +%s)
    work=$(mktemp -d)
    (
      cd "$work" || exit 1
      cp "$source/main.go" . || exit 1
      go mod init "imagekit.local/tools/$name" >/dev/null 2>&1 || exit 1
      if [ "$name" = kube ]; then
        go mod edit -require="k8s.io/kubernetes@$KUBE_VERSION" \
          -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION" || exit 1
        for staging in "${KUBE_STAGING[@]}"; do
          go mod edit -replace="k8s.io/$staging=k8s.io/$staging@$KUBE_STAGING_VERSION" || exit 1
        done
        go mod tidy >/dev/null 2>&1 || { go mod tidy; exit 1; }
      fi
      CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out.partial" .
    ) || {
      rm -rf "$work"
      exec {lockfd}>&-
      log "could not build $name $KUBE_VERSION: see the go output above"
      return 3
    }
    rm -rf "$work"
    mv "$out.partial" "$out"
    log "built $name in $(($(date +%s) - started)) s"
  fi
  exec {lockfd}>&-
  printf '%s' "$out"
}

install_kube() {
  local kube pause program bindir=$root/.tools/bin
  if ! command -v go >/dev/null 2>&1; then
    log "no Go toolchain: the test cluster (etcd, kube-apiserver, kubelet, ...) is not built"
    return 3
  fi
  mkdir -p "$bindir"
  kube=$(build_kube_binary kube "$root/scripts/lib/kube") || return 3
  pause=$(build_kube_binary kube-pause "$root/scripts/lib/kube/pause") || return 3
  ln -sf "$kube" "$bindir/kube"
  for program in "${KUBE_PROGRAMS[@]}"; do
    ln -sf "$kube" "$bindir/$program"
  done
  ln -sf "$pause" "$bindir/kube-pause"
}
