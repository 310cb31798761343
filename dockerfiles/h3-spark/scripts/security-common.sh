# shellcheck shell=sh
# STAND-IN written by imagekit for the h3-spark seed plan, not the H3 report's file: the
# report's fail-closed network policy as a sourced library. The server listens on loopback
# unless remote access is asked for explicitly; remote access needs a non-loopback bind
# address, H3_ALLOW_REMOTE_API=true and an API key of at least 32 characters, and an .env
# file holding that key must not be readable by group or others.

h3_is_loopback() {
  case "$1" in
    127.*|localhost|::1) return 0 ;;
    *) return 1 ;;
  esac
}

# h3_validate_network_security BIND_HOST ALLOW_REMOTE API_KEY [ENV_FILE]
h3_validate_network_security() {
  bind_host=$1 allow_remote=$2 api_key=$3 env_file=${4:-}
  if h3_is_loopback "$bind_host"; then
    return 0
  fi
  if [ "$allow_remote" != "true" ]; then
    echo "security: $bind_host is not loopback and H3_ALLOW_REMOTE_API is not true" >&2
    return 1
  fi
  if [ "${#api_key}" -lt 32 ]; then
    echo "security: remote access needs VLLM_API_KEY of at least 32 characters" >&2
    return 1
  fi
  if [ -n "$env_file" ] && [ -f "$env_file" ]; then
    mode=$(stat -c %a "$env_file")
    if [ "$mode" != "600" ]; then
      echo "security: $env_file holds the API key and must be mode 600 (is $mode)" >&2
      return 1
    fi
  fi
  return 0
}
