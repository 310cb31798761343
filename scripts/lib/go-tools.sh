# The Go tools imagekit's tests, benchmarks and docs use beside it: sourced by setup-host.sh.
#
# Each tool is built from source with pinned versions from the Go module proxy (the machines
# here reach no other download site), into a cache keyed by module, version and Go version
# (~/.cache/imagekit/go-tools/, or IMAGEKIT_CACHE_DIR's), so only a new machine pays the
# build. Each is built from a small wrapper module: `go install MODULE@VERSION` refuses a
# module whose go.mod has replace directives (buildx's and buildkit's do), while a wrapper
# that requires the module and builds its command package works for every one of them.
# The binaries are linked into .tools/bin of the repository (ignored by git), and the buildx
# plugin into the docker CLI's plugin folder, where both clients here look for it.
#
# Bump a version here and the next setup builds it; the README's setup section names them.

# tool name, module, package to build, version
GO_TOOLS=(
  "crane github.com/google/go-containerregistry github.com/google/go-containerregistry/cmd/crane v0.22.1"
  "regctl github.com/regclient/regclient github.com/regclient/regclient/cmd/regctl v0.11.7"
  "oras oras.land/oras oras.land/oras/cmd/oras v1.3.6"
  "cosign github.com/sigstore/cosign/v3 github.com/sigstore/cosign/v3/cmd/cosign v3.1.3"
  "buildctl github.com/moby/buildkit github.com/moby/buildkit/cmd/buildctl v0.34.2"
  "buildkitd github.com/moby/buildkit github.com/moby/buildkit/cmd/buildkitd v0.34.2"
  "docker-buildx github.com/docker/buildx github.com/docker/buildx/cmd/buildx v0.38.2"
)

go_tools_cache() {
  local base=${IMAGEKIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/imagekit}
  printf '%s/go-tools' "$base"
}

# build_go_tool NAME MODULE PACKAGE VERSION: prints the cached binary's path.
build_go_tool() {
  local name=$1 module=$2 package=$3 version=$4
  local gover key out work lockfd
  gover=$(go env GOVERSION)
  key=$(printf '%s@%s %s' "$module" "$version" "$gover" | sha256sum | cut -c1-12)
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
      CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out.partial" "$package"
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
  local entry name module package version built bindir plugins
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
    read -r name module package version <<<"$entry"
    built=$(build_go_tool "$name" "$module" "$package" "$version") || return 3
    ln -sf "$built" "$bindir/$name"
  done
  # The docker CLI (28.x at /usr/local/bin and Debian's 20.10 alike) looks for plugins in
  # ~/.docker/cli-plugins; `docker buildx` then works with either client.
  plugins=${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins
  mkdir -p "$plugins"
  ln -sf "$bindir/docker-buildx" "$plugins/docker-buildx"
}
