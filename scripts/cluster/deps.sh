#!/usr/bin/env bash
# Debian packages the local cluster needs (runc's seccomp, iptables, openssl), only when missing.
set -euo pipefail
missing=()
[ -f /usr/include/seccomp.h ] || missing+=(libseccomp-dev)
command -v iptables >/dev/null || missing+=(iptables)
command -v openssl >/dev/null || missing+=(openssl)
command -v gcc >/dev/null || missing+=(gcc libc6-dev)
command -v curl >/dev/null || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  [ -f /var/lib/apt/lists/.gpujobs-updated ] || { apt-get update -qq && touch /var/lib/apt/lists/.gpujobs-updated; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
