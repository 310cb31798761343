# The Go tools imagekit's tests, benchmarks and docs use beside it: sourced by setup-host.sh.
#
# Each tool is built from source with pinned versions from the Go module proxy (the machines
# here reach no other download site), into a cache keyed by module, version, Go version and
# build flags (~/.cache/imagekit/go-tools/, or IMAGEKIT_CACHE_DIR's), so only a new machine
# pays the build. Each is built from a small wrapper module that requires the tool's module
# and builds its command package: `go install MODULE@VERSION` refuses a module whose go.mod
# has replace directives, and a replace directive applies only in the main module, so a tool
# that has them (Kyverno's CLI) builds only from a wrapper that carries the same directives.
# The table below names each tool's directives; before a build, setup reads the module's own
# go.mod (from the proxy) and refuses to build when its replace directives are not exactly
# the table's, so a bump that adds, drops or moves one stops with both lists printed instead
# of building a binary from other code than the release's.
# The binaries are linked into .tools/bin of the repository (ignored by git), and the buildx
# plugin into the docker CLI's plugin folder, where both clients here look for it.
#
# Bump a version here and the next setup builds it; the README's setup section names them.

# tool name, module, package to build, version, the variable its release build stamps with
# the version (so `TOOL version` says which one; "-" where the tool reads it itself), then
# the module's replace directives, each as `go mod edit -replace` takes it (OLD=NEW@VERSION)
GO_TOOLS=(
  "crane github.com/google/go-containerregistry github.com/google/go-containerregistry/cmd/crane v0.22.1 github.com/google/go-containerregistry/cmd/crane/cmd.Version"
  "regctl github.com/regclient/regclient github.com/regclient/regclient/cmd/regctl v0.11.7 -"
  "oras oras.land/oras oras.land/oras/cmd/oras v1.3.6 -"
  "cosign github.com/sigstore/cosign/v3 github.com/sigstore/cosign/v3/cmd/cosign v3.1.3 sigs.k8s.io/release-utils/version.gitVersion"
  "buildctl github.com/moby/buildkit github.com/moby/buildkit/cmd/buildctl v0.34.2 github.com/moby/buildkit/version.Version"
  "buildkitd github.com/moby/buildkit github.com/moby/buildkit/cmd/buildkitd v0.34.2 github.com/moby/buildkit/version.Version"
  "docker-buildx github.com/docker/buildx github.com/docker/buildx/cmd/buildx v0.38.2 github.com/docker/buildx/version.Version"
  # Kyverno's CLI: the cluster-side judge the attestation tests run beside cosign and the
  # gate (`kyverno apply`, the same verifyImages engine as the admission controller).
  "kyverno github.com/kyverno/kyverno github.com/kyverno/kyverno/cmd/cli/kubectl-kyverno v1.19.1 github.com/kyverno/kyverno/pkg/version.BuildVersion k8s.io/pod-security-admission=github.com/kyverno/pod-security-admission@v0.0.0-20251031094455-46f20778634f"
  # The sigstore policy-controller's offline tester: its admission decision, the third judge.
  "policy-tester github.com/sigstore/policy-controller github.com/sigstore/policy-controller/cmd/tester v0.13.1 - github.com/golang/glog=github.com/jdolitsky/glog@v0.0.0-20220729172235-78744e90d087 k8s.io/code-generator=k8s.io/code-generator@v0.29.4 k8s.io/kube-openapi=k8s.io/kube-openapi@v0.0.0-20231010175941-2dd684a91f00"
)

go_tools_cache() {
  local base=${IMAGEKIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/imagekit}
  printf '%s/go-tools' "$base"
}

# module_replaces MODULE VERSION: the replace directives of the module's own go.mod, one a
# line in `go mod edit -replace` form (OLD[@V]=NEW[@V]), sorted.
module_replaces() {
  local - gomod
  set -o pipefail
  # go mod download -json answers {"Error": ...} for a version the proxy does not serve
  gomod=$(go mod download -json "$1@$2" | python3 -c '
import json, sys
found = json.load(sys.stdin)
sys.exit(found["Error"]) if found.get("Error") else print(found["GoMod"])
') || return 1
  go mod edit -json "$gomod" | python3 -c '
import json, sys
def side(m):
    return m["Path"] + ("@" + m["Version"] if m.get("Version") else "")
for r in json.load(sys.stdin).get("Replace") or []:
    print(side(r["Old"]) + "=" + side(r["New"]))
' | LC_ALL=C sort
}

# build_go_tool NAME MODULE PACKAGE VERSION STAMP [REPLACE...]: prints the cached binary's path.
build_go_tool() {
  local name=$1 module=$2 package=$3 version=$4 stamp=$5
  shift 5
  local replaces=("$@")
  local gover key out work lockfd want have directive ldflags='-s -w'
  [ "$stamp" = - ] || ldflags="$ldflags -X $stamp=$version"
  gover=$(go env GOVERSION)
  # A tool without replace directives keeps the key it had before they could be named.
  key=$(printf '%s@%s %s %s%s' "$module" "$version" "$gover" "$ldflags" \
    "${replaces[*]:+ ${replaces[*]}}" | sha256sum | cut -c1-12)
  out="$(go_tools_cache)/$name-$version-$key"
  mkdir -p "$(go_tools_cache)"
  # One build at a time per tool: two checkouts set up at once wait for each other.
  exec {lockfd}>"$(go_tools_cache)/$name.lock"
  flock "$lockfd"
  if [ ! -x "$out" ]; then
    log "building $name $version from the Go module proxy (once per machine)"
    work=$(mktemp -d)
    # Each step says `|| exit 1`: errexit is off inside this subshell, which runs where a
    # failure is handled (the `||` below, and the caller's).
    (
      cd "$work" || exit 1
      go mod init imagekit.local/tools/"$name" >/dev/null 2>&1 || exit 1
      # The wrapper carries exactly the module's own replace directives, no more, no fewer;
      # otherwise the tool's own requirements decide, as MVS picks them.
      want=$(printf '%s\n' "${replaces[@]}" | sed '/^$/d' | LC_ALL=C sort)
      have=$(module_replaces "$module" "$version") || exit 1
      if [ "$want" != "$have" ]; then
        log "$module $version's go.mod has the replace directives:"
        printf '  %s\n' "${have:-(none)}" >&2
        log "but scripts/lib/go-tools.sh names:"
        printf '  %s\n' "${want:-(none)}" >&2
        exit 1
      fi
      for directive in "${replaces[@]}"; do
        go mod edit -replace="$directive" || exit 1
      done
      go get "$package@$version" || exit 1
      CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out.partial" "$package"
    ) || {
      rm -rf "$work"
      exec {lockfd}>&-
      log "could not build $name $version ($module): see the go output above"
      return 3
    }
    rm -rf "$work"
    mv "$out.partial" "$out"
  fi
  exec {lockfd}>&-
  printf '%s' "$out"
}

install_go_tools() {
  local buildx= entry name module package version stamp rest built bindir plugins
  local -a replaces
  if ! command -v go >/dev/null 2>&1; then
    [ -x /usr/local/go/bin/go ] && PATH=/usr/local/go/bin:$PATH
  fi
  if ! command -v go >/dev/null 2>&1; then
    log "no Go toolchain: crane, regctl, oras, cosign, buildctl, buildkitd, buildx, kyverno and policy-tester are not built"
    log "install Go 1.26 (https://go.dev/dl) and run make setup again"
    return 3
  fi
  bindir=$root/.tools/bin
  mkdir -p "$bindir"
  for entry in "${GO_TOOLS[@]}"; do
    read -r name module package version stamp rest <<<"$entry"
    read -r -a replaces <<<"$rest"
    built=$(build_go_tool "$name" "$module" "$package" "$version" "$stamp" "${replaces[@]}") \
      || return 3
    ln -sf "$built" "$bindir/$name"
    if [ "$name" = docker-buildx ]; then buildx=$built; fi
  done
  # The docker CLI (28.x at /usr/local/bin and Debian's 20.10 alike) looks for plugins in
  # $DOCKER_CONFIG/cli-plugins and in the system folder /usr/local/lib/docker/cli-plugins.
  # The system folder is the one that counts: a process with a private DOCKER_CONFIG (every
  # test here, a CI job with its own login) still finds buildx there, as it does where
  # Docker's own packages installed it. The links name the cached binary, not this
  # checkout's .tools, so removing a checkout leaves them working.
  for plugins in /usr/local/lib/docker/cli-plugins "${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"; do
    as_root mkdir -p "$plugins" && as_root ln -sf "$buildx" "$plugins/docker-buildx" \
      || log "could not link the buildx plugin into $plugins"
  done
}
