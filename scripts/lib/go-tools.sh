# The Go tools imagekit's tests, benchmarks and docs use beside it: sourced by setup-host.sh.
#
# Each tool is built from source with pinned versions from the Go module proxy (the machines
# here reach no other download site), into a cache keyed by module, version and Go version
# (~/.cache/imagekit/go-tools/, or IMAGEKIT_CACHE_DIR's), so only a new machine pays the
# build. Each is built from a small wrapper module that requires the tool's module and builds
# its command package: `go install MODULE@VERSION` refuses a module whose go.mod has replace
# directives (earlier buildx and buildkit releases had them; the versions pinned here have
# none, checked 2026-12-04), and the wrapper works whichever way a bump goes.
# The binaries are linked into .tools/bin of the repository (ignored by git), and the buildx
# plugin into the docker CLI's plugin folder, where both clients here look for it.
#
# Bump a version here and the next setup builds it; the README's setup section names them.

# tool name, module, package to build, version, and the variable its release build stamps
# with the version (so `TOOL version` says which one; "-" where the tool reads it itself)
GO_TOOLS=(
  "crane github.com/google/go-containerregistry github.com/google/go-containerregistry/cmd/crane v0.22.1 github.com/google/go-containerregistry/cmd/crane/cmd.Version"
  "regctl github.com/regclient/regclient github.com/regclient/regclient/cmd/regctl v0.11.7 -"
  "oras oras.land/oras oras.land/oras/cmd/oras v1.3.6 -"
  "cosign github.com/sigstore/cosign/v3 github.com/sigstore/cosign/v3/cmd/cosign v3.1.3 sigs.k8s.io/release-utils/version.gitVersion"
  "buildctl github.com/moby/buildkit github.com/moby/buildkit/cmd/buildctl v0.34.2 github.com/moby/buildkit/version.Version"
  "buildkitd github.com/moby/buildkit github.com/moby/buildkit/cmd/buildkitd v0.34.2 github.com/moby/buildkit/version.Version"
  "docker-buildx github.com/docker/buildx github.com/docker/buildx/cmd/buildx v0.38.2 github.com/docker/buildx/version.Version"
)

go_tools_cache() {
  local base=${IMAGEKIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/imagekit}
  printf '%s/go-tools' "$base"
}

# build_go_tool NAME MODULE PACKAGE VERSION STAMP: prints the cached binary's path.
build_go_tool() {
  local name=$1 module=$2 package=$3 version=$4 stamp=$5
  local gover key out work lockfd ldflags='-s -w'
  [ "$stamp" = - ] || ldflags="$ldflags -X $stamp=$version"
  gover=$(go env GOVERSION)
  key=$(printf '%s@%s %s %s' "$module" "$version" "$gover" "$ldflags" | sha256sum | cut -c1-12)
  out="$(go_tools_cache)/$name-$version-$key"
  mkdir -p "$(go_tools_cache)"
  # One build at a time per tool: two checkouts set up at once wait for each other.
  exec {lockfd}>"$(go_tools_cache)/$name.lock"
  flock "$lockfd"
  if [ ! -x "$out" ]; then
    log "building $name $version from the Go module proxy (once per machine)"
    work=$(mktemp -d)
    (
      cd "$work"
      go mod init imagekit.local/tools/"$name" >/dev/null 2>&1
      # No replace directives here: the tool's own requirements decide, as MVS picks them.
      go get "$package@$version"
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
  local buildx= entry name module package version stamp built bindir plugins
  if ! command -v go >/dev/null 2>&1; then
    [ -x /usr/local/go/bin/go ] && PATH=/usr/local/go/bin:$PATH
  fi
  if ! command -v go >/dev/null 2>&1; then
    log "no Go toolchain: crane, regctl, oras, cosign, buildctl, buildkitd and buildx are not built"
    log "install Go 1.26 (https://go.dev/dl) and run make setup again"
    return 3
  fi
  bindir=$root/.tools/bin
  mkdir -p "$bindir"
  for entry in "${GO_TOOLS[@]}"; do
    read -r name module package version stamp <<<"$entry"
    built=$(build_go_tool "$name" "$module" "$package" "$version" "$stamp") || return 3
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
